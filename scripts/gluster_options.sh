# The GlusterFS volume options of scripts/shared_fs.sh and scripts/cluster.sh (sourced, not run):
# every client-side cache off, so each read crosses the wire to the brick as a PFS client's would
# when its dataset is larger than its memory; write-behind off, so a write's error comes from
# write(); a server that goes away noticed after 10 s instead of 42.
OPTIONS=(
    performance.io-cache off
    performance.read-ahead off
    performance.quick-read off
    performance.stat-prefetch off
    performance.md-cache-timeout 0
    performance.open-behind off
    performance.readdir-ahead off
    performance.nl-cache off
    performance.parallel-readdir off
    performance.write-behind off
    network.ping-timeout 10
)
