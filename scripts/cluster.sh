#!/usr/bin/env bash
# A multi-node cluster on this machine: K compute nodes, a login/controller node and a storage
# node, each a set of Linux namespaces (network, hostname, mounts), joined by veth links to a
# bridge and shaped with tc tbf. Real Slurm (slurmctld on the login node, slurmd on each compute
# node), real MPI between nodes over the links, and a GlusterFS volume served by the storage node
# and FUSE-mounted at /pfs on every node. Needs root; Debian's slurmctld slurmd slurm-client munge
# glusterfs-server glusterfs-client (installed when missing).
#
#   bash scripts/cluster.sh up [--nodes K] [--link RATE] [--storage-link RATE] [--storage-latency-ms MS]
#   bash scripts/cluster.sh run -- sbatch --wait -N 2 --ntasks-per-node 2 jobs/train.sbatch ...
#   bash scripts/cluster.sh status
#   bash scripts/cluster.sh counters [HOST...]   # per host: bytes received and sent on its link ("host rx tx")
#   bash scripts/cluster.sh down
#
# Faults, for the cluster tests and for trying a job's recovery by hand:
#   crash NODE            SIGKILL every process of NODE (slurmd, job steps, ranks, its /pfs client)
#   link NODE down|up     take NODE's link down or bring it back
#   storage stop|start    stop the storage node's GlusterFS server (clients' reads then fail) or restart it
# `up` with the running cluster's settings brings back what a fault took away and changes nothing else.
# One `up` at a time: a second one while the first runs is refused, naming it (a lock in the state
# dir). An `up` that fails tears down what it built (HPCSHUFFLE_CLUSTER_UP_FAIL=1 makes it fail once
# everything is up, for the tests); a repair of a running cluster that fails leaves it up.
#
# Defaults: 3 nodes, compute links 10gbit, storage link 1gbit, no storage latency. A node has the
# hostname nodeN, its own /tmp (node-local storage: a directory under the state dir) and /dev/shm,
# and sees the rest of this machine's files, so the repository, its venv and run directories must
# not be under /tmp (`run` refuses). --storage-latency-ms delays every read on the storage node's
# brick (GlusterFS's delay-gen translator): a latency that is set, not measured.
#
# Safety: the cluster's addresses (one /24) exist only inside its namespaces. The machine's own
# namespace gets an `unreachable` route for that /24, so a packet sent there by mistake fails at
# once instead of leaving by the default route, and the Slurm configuration exists only in a
# tmpfs that only the cluster's namespaces see: a Slurm client started outside `run` finds no
# configuration for this cluster. `run` starts clients inside the login node's namespaces.
set -euo pipefail

SELF=$(readlink -f "${BASH_SOURCE[0]}")
STATE=${HPCSHUFFLE_CLUSTER_STATE:-/var/tmp/hpcshuffle-cluster}
NET=10.203.57               # the cluster's /24; login .2, storage .3, nodeN .(10+N)
NS=hpcs-                    # prefix of the network namespaces' names
PFS=/pfs                    # where every node mounts the storage node's volume
VOLUME=pfs
MAX_NODES=32
BURST=128kb                 # tbf bucket: at least one 64 KB GSO segment of the veth
UP_LOCK=$STATE/up.lock      # held by the one `up` that runs; it holds who that is
UP_LOCK_FD=199              # up's descriptor on it once taken; never passed to what up starts (see lock_up)
source "$(dirname "$SELF")/gluster_options.sh"
source "$(dirname "$SELF")/processes.sh"  # alive

say() { echo "cluster: $*" >&2; }
die() { say "$*"; exit 1; }

address() {  # address HOST
    case $1 in
        ctl) echo "$NET.2" ;;
        fs) echo "$NET.3" ;;
        node*) echo "$NET.$((10 + ${1#node}))" ;;
    esac
}

settings_file=$STATE/settings
settings() { cat "$settings_file" 2>/dev/null || true; }
setting() { settings | awk -F= -v k="$1" '$1 == k {print $2}'; }
nodes() { seq -f 'node%g' 1 "$(setting nodes)"; }
hosts() { echo ctl fs; nodes; }

ns_pids() {  # ns_pids HOST NAME...: live processes of HOST whose command is one of NAMEs
    local host=$1 pid
    shift
    for pid in $(ip netns pids "${NS}$host" 2>/dev/null || true); do
        alive "$pid" || continue
        printf '%s\n' "$@" | grep -qxF "$(cat "/proc/$pid/comm" 2>/dev/null)" && echo "$pid"
    done
    return 0
}

holder_pid() { cat "$STATE/run/$1.holder" 2>/dev/null || true; }
holder_alive() { alive "$(holder_pid "$1")"; }
# run a command in HOST's namespaces (network, hostname, mounts, IPC)
inside() {
    local host=$1 pid
    shift
    pid=$(holder_pid "$host")
    alive "$pid" || die "$host is not up (no live holder process); run: bash $SELF up"
    nsenter -t "$pid" -m -u -i -n -- "$@" {UP_LOCK_FD}>&-
}

is_up() { ip netns list 2>/dev/null | grep -qw "${NS}sw"; }

need_root() { [ "$(id -u)" = 0 ] || die "needs root (namespaces, tc, mounts, daemons); running as uid $(id -u): run it with sudo"; }

install() {
    local missing=()
    for tool in slurmctld slurmd sbatch munged glusterd gluster mount.glusterfs nsenter unshare tc; do
        command -v "$tool" >/dev/null || missing+=("$tool")
    done
    [ ${#missing[@]} = 0 ] && return
    say "installing slurmctld slurmd slurm-client munge glusterfs-server glusterfs-client (apt; missing: ${missing[*]})"
    export DEBIAN_FRONTEND=noninteractive
    local packages=(slurmctld slurmd slurm-client munge glusterfs-server glusterfs-client iproute2 util-linux)
    { apt-get install -y -q "${packages[@]}" >/dev/null 2>&1 \
        || { apt-get update -q >/dev/null && apt-get install -y -q "${packages[@]}" >/dev/null; }; } \
        || die "apt-get install ${packages[*]} failed"
}

# ---- the network -----------------------------------------------------------------------------

# shape NAMESPACE DEVICE RATE: tbf on the device's egress (no-op for RATE=none)
shape() {
    [ "$3" = none ] && return
    local out
    out=$(ip netns exec "$1" tc qdisc replace dev "$2" root tbf rate "$3" burst "$BURST" latency 20ms 2>&1) \
        || die "tc refused the rate '$3' on $2: $out; give a rate tc understands, e.g. 1gbit, 500mbit, or none"
}

check_rate() {  # fail before building anything when tc refuses a rate
    local rate=$1 flag=$2 out rc=0
    [ "$rate" = none ] && return
    ip netns add "${NS}probe"
    out=$(ip netns exec "${NS}probe" tc qdisc add dev lo root tbf rate "$rate" burst "$BURST" latency 20ms 2>&1) || rc=$?
    ip netns del "${NS}probe"
    unmount_netns_dir
    [ $rc = 0 ] || die "tc refused $flag '$rate': $out; give a rate tc understands, e.g. 1gbit, 500mbit, or none"
}

unmount_netns_dir() {  # the first `ip netns add` bind-mounts /run/netns; undo it once no namespace is left
    if mountpoint -q /run/netns && [ -z "$(ls -A /run/netns)" ]; then umount /run/netns 2>/dev/null || true; fi
}

link_host() {  # link_host HOST RATE: its namespace, a veth to the bridge, its address, shaping both ways
    local host=$1 rate=$2 ns=${NS}$1
    ip netns list | grep -qw "$ns" || ip netns add "$ns"
    if ! ip -n "$ns" link show eth0 >/dev/null 2>&1; then
        ip -n "${NS}sw" link add "v$host" type veth peer name eth0 netns "$ns"
        ip -n "${NS}sw" link set "v$host" master br0 up
        ip -n "$ns" addr add "$(address "$host")/24" dev eth0
    fi
    ip -n "$ns" link set lo up
    ip -n "$ns" link set eth0 up
    shape "$ns" eth0 "$rate"
    shape "${NS}sw" "v$host" "$rate"
}

network_up() {
    if ! ip netns list | grep -qw "${NS}sw"; then
        ip netns add "${NS}sw"
        ip -n "${NS}sw" link add br0 type bridge
    fi
    ip -n "${NS}sw" link set lo up
    ip -n "${NS}sw" link set br0 up
    ip route replace unreachable "$NET.0/24"  # this machine never routes the cluster's addresses
    link_host ctl none
    link_host fs "$(setting storage_link)"
    for node in $(nodes); do link_host "$node" "$(setting link)"; done
}

# ---- the namespaces' holders -----------------------------------------------------------------

# The first holder ("root") owns a mount namespace with a private tmpfs on $STATE/etc holding
# slurm.conf and hosts; every host's holder starts inside it, so only the cluster sees that tmpfs.
root_up() {
    holder_alive root && return
    mkdir -p "$STATE/run" "$STATE/etc"
    setsid unshare --mount --propagation private --fork bash "$SELF" _root </dev/null >>"$STATE/log/holders.log" 2>&1 \
        {UP_LOCK_FD}>&- &
    wait_for "$STATE/run/root.holder" "the cluster's mount namespace"
}

write_config() {  # in the root holder's mount namespace: the files only the cluster sees
    local node cpus=16 memory=4096
    {
        printf '127.0.0.1 localhost\n'
        for host in $(hosts); do printf '%s %s\n' "$(address "$host")" "$host"; done
    } >"$STATE/etc/hosts"
    echo "options attempts:1 timeout:1" >"$STATE/etc/resolv.conf"
    {
        echo "# written by hpcshuffle scripts/cluster.sh; only the cluster's namespaces see this file"
        cat <<EOF
ClusterName=nscluster
SlurmctldHost=ctl($(address ctl))
AuthInfo=socket=$STATE/munge/munge.socket
StateSaveLocation=$STATE/slurm/ctld
SlurmdSpoolDir=$STATE/slurm/%n
SlurmctldPidFile=$STATE/run/slurmctld.pid
SlurmdPidFile=$STATE/run/%n.slurmd.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/%n.slurmd.log
SlurmdParameters=config_overrides
MpiDefault=pmi2
$(grep -v '^#' "$(dirname "$SELF")/slurm_common.conf")
# job ids from the clock: a later cluster never reuses a run directory named by job id
FirstJobId=$(( $(date +%s) % 60000000 + 1 ))
SlurmdTimeout=15
InactiveLimit=0
KillWait=5
EOF
        for node in $(nodes); do
            echo "NodeName=$node NodeAddr=$(address "$node") CPUs=$cpus RealMemory=$memory State=UNKNOWN"
        done
        echo "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP"
    } >"$STATE/etc/slurm.conf"
}

# holder_up HOST: a process in HOST's network namespace with its own hostname and mounts
holder_up() {
    local host=$1
    holder_alive "$host" && return
    rm -f "$STATE/run/$host.holder"
    mkdir -p "$STATE/nodes/$host/tmp"
    chmod 1777 "$STATE/nodes/$host/tmp"
    [ -s "$STATE/nodes/$host/boot_id" ] || cat /proc/sys/kernel/random/uuid >"$STATE/nodes/$host/boot_id"
    nsenter -t "$(holder_pid root)" -m -- ip netns exec "${NS}$host" \
        setsid unshare --uts --ipc --mount --propagation private --fork bash "$SELF" _holder "$host" \
        </dev/null >>"$STATE/log/holders.log" 2>&1 {UP_LOCK_FD}>&- &
    wait_for "$STATE/run/$host.holder" "$host"
}

wait_for() {  # wait_for FILE WHAT: a holder writes its pid there once its mounts are in place
    for _ in $(seq 100); do
        if alive "$(cat "$1" 2>/dev/null || true)"; then return; fi
        sleep 0.05
    done
    die "$2 did not come up; see $STATE/log/holders.log"
}

# ---- daemons -----------------------------------------------------------------------------------

munge_up() {
    local dir=$STATE/munge
    alive "$(cat "$dir/munged.pid" 2>/dev/null || true)" && return
    mkdir -p "$dir"
    [ -s "$dir/munge.key" ] || dd if=/dev/urandom bs=1 count=1024 of="$dir/munge.key" 2>/dev/null
    chown -R munge:munge "$dir"
    chmod 755 "$dir"
    chmod 400 "$dir/munge.key"
    inside ctl runuser -u munge -- munged --socket="$dir/munge.socket" --key-file="$dir/munge.key" \
        --pid-file="$dir/munged.pid" --log-file="$dir/munged.log" --seed-file="$dir/munged.seed" \
        || die "munged did not start; see $dir/munged.log"
    wait_for "$dir/munged.pid" munged
}

slurmctld_up() {
    alive "$(cat "$STATE/run/slurmctld.pid" 2>/dev/null || true)" && return
    mkdir -p "$STATE/slurm/ctld"
    inside ctl slurmctld || die "slurmctld did not start; see $STATE/log/slurmctld.log"
    wait_for "$STATE/run/slurmctld.pid" slurmctld
}

slurmd_up() {
    local node=$1
    alive "$(cat "$STATE/run/$node.slurmd.pid" 2>/dev/null || true)" && return
    mkdir -p "$STATE/slurm/$node"
    inside "$node" slurmd || die "slurmd on $node did not start; see $STATE/log/$node.slurmd.log"
    wait_for "$STATE/run/$node.slurmd.pid" "slurmd on $node"
}

gl() { inside fs timeout 30 gluster --mode=script "$@"; }

storage_up() {
    local pid info current value i regraphed=0
    pid=$(cat "$STATE/run/glusterd.pid" 2>/dev/null || true)
    if ! alive "$pid"; then
        # the background subshell lives as long as glusterd (it does not detach): it must not keep the lock
        inside fs setsid glusterd --no-daemon --log-file="$STATE/fs/log/glusterd.log" \
            </dev/null >>"$STATE/fs/log/glusterd.out" 2>&1 {UP_LOCK_FD}>&- &
        echo $! >"$STATE/run/glusterd.pid"
        for _ in $(seq 60); do
            gl volume list >/dev/null 2>&1 && break
            sleep 0.5
        done
        gl volume list >/dev/null 2>&1 || die "glusterd on fs does not answer; see $STATE/fs/log/glusterd.log"
    fi
    if ! info=$(gl volume info "$VOLUME" 2>/dev/null); then
        gl volume create "$VOLUME" "fs:$STATE/fs/brick" force >/dev/null || die "gluster volume create $VOLUME failed"
        info=$(gl volume info "$VOLUME")
    fi
    current=$(gl volume get "$VOLUME" all)
    local options=("${OPTIONS[@]}")
    local latency_us=$(( $(setting storage_latency_ms) * 1000 ))
    if [ "$latency_us" -gt 0 ]; then  # the delay-gen translator goes right above the brick's posix
        options+=(debug.delay-gen posix delay-gen.enable read delay-gen.delay-percentage 100
                  delay-gen.delay-duration "$latency_us")
    elif [ "$(awk '$1 == "debug.delay-gen" {print $2}' <<<"$current")" != off ]; then
        gl volume reset "$VOLUME" debug.delay-gen >/dev/null || die "gluster volume reset $VOLUME debug.delay-gen failed"
        regraphed=1
    fi
    for ((i = 0; i < ${#options[@]}; i += 2)); do
        value=$(awk -v k="${options[i]}" '$1 == k {print $2; exit}' <<<"$current")
        [ "$value" = "${options[i + 1]}" ] && continue
        gl volume set "$VOLUME" "${options[i]}" "${options[i + 1]}" >/dev/null \
            || die "gluster volume set $VOLUME ${options[i]} ${options[i + 1]} failed"
        [ "${options[i]}" != debug.delay-gen ] || regraphed=1
    done
    # a running brick keeps its translators: one added or removed takes a restart (before any mount)
    if [ "${regraphed:-0}" = 1 ] && grep -q '^Status: Started' <<<"$info"; then
        gl volume stop "$VOLUME" force >/dev/null || die "gluster volume stop $VOLUME failed"
        info=$(gl volume info "$VOLUME")
    fi
    if ! grep -q '^Status: Started' <<<"$info"; then
        gl volume start "$VOLUME" >/dev/null || die "gluster volume start $VOLUME failed"
    elif [ -z "$(ns_pids fs glusterfsd)" ]; then
        gl volume start "$VOLUME" force >/dev/null || die "gluster volume start $VOLUME force failed"
    fi
}

pfs_answers() { inside "$1" timeout 10 stat -t "$PFS/." >/dev/null 2>&1 && inside "$1" mountpoint -q "$PFS"; }

mount_pfs() {
    local host=$1
    pfs_answers "$host" && return
    inside "$host" umount -l "$PFS" 2>/dev/null || true
    inside "$host" mount -t glusterfs -o "direct-io-mode=enable,log-file=$STATE/log/$host.pfs.log" "fs:/$VOLUME" "$PFS" \
        || die "mounting fs:/$VOLUME at $PFS on $host failed; see $STATE/log/$host.pfs.log"
    for _ in $(seq 50); do
        pfs_answers "$host" && return
        sleep 0.2
    done
    die "$PFS on $host does not answer after mounting; see $STATE/log/$host.pfs.log"
}

slurm_ready() {  # every node idle (or busy) in sinfo
    local want states
    want=$(setting nodes)
    for _ in $(seq 100); do
        states=$(inside ctl timeout 10 sinfo -h -N -o '%N %t' 2>/dev/null || true)
        if [ "$(grep -cE ' (idle|mix|alloc|comp)' <<<"$states")" = "$want" ]; then return; fi
        sleep 0.2
    done
    inside ctl scontrol update NodeName="node[1-$want]" State=RESUME 2>/dev/null || true
    sleep 1
    states=$(inside ctl timeout 10 sinfo -h -N -o '%N %t' 2>/dev/null || true)
    [ "$(grep -cE ' (idle|mix|alloc|comp)' <<<"$states")" = "$want" ] || die "Slurm's nodes are not ready:"$'\n'"$states"
}

# ---- sub-commands --------------------------------------------------------------------------------

# lock_up: take the up lock or refuse, naming the `up` that holds it. Bash passes its descriptors to
# every child, so what up starts closes it ({UP_LOCK_FD}>&-): a daemon would otherwise hold the lock
# for the cluster's life and lock out every later `up`.
lock_up() {
    mkdir -p "$STATE"
    exec {UP_LOCK_FD}>>"$UP_LOCK"
    if ! flock -n "$UP_LOCK_FD"; then
        die "another 'up' is running ($(cat "$UP_LOCK" 2>/dev/null || echo 'its holder unknown')): wait for it" \
            "to end, then run this again (the lock is $UP_LOCK)"
    fi
    echo "pid $$, 'up $1' since $(date -u '+%H:%M:%S UTC')" >"$UP_LOCK"
}

# up_failed: what `up` runs on any failure; a cluster it built from nothing goes (as `down`), one that
# was up before it (a repair) stays as it is.
up_failed() {
    local rc=$?
    trap - EXIT
    [ "$rc" = 0 ] && return
    if [ "${UP_BUILDS:-0}" = 1 ]; then
        say "up failed (exit $rc): tearing down what it built"
        down || say "tearing down failed: run 'bash $SELF down'"
    else
        say "up failed (exit $rc) repairing a cluster that was up before it; left as it is"
    fi
    exit "$rc"
}

up() {
    local nodes=3 link=10gbit storage_link=1gbit latency=0 asked="$*"
    while [ $# -gt 0 ]; do
        case $1 in
            --nodes) nodes=${2:?--nodes needs a number}; shift 2 ;;
            --link) link=${2:?--link needs a rate}; shift 2 ;;
            --storage-link) storage_link=${2:?--storage-link needs a rate}; shift 2 ;;
            --storage-latency-ms) latency=${2:?--storage-latency-ms needs a number}; shift 2 ;;
            *) die "up: unknown option '$1' (options: --nodes K --link RATE --storage-link RATE --storage-latency-ms MS)" ;;
        esac
    done
    [[ $nodes =~ ^[0-9]+$ ]] && [ "$nodes" -ge 1 ] && [ "$nodes" -le $MAX_NODES ] \
        || die "--nodes must be a whole number from 1 to $MAX_NODES, got '$nodes'"
    [[ $latency =~ ^[0-9]+$ ]] || die "--storage-latency-ms must be a whole number of milliseconds (0: none), got '$latency'"
    need_root
    lock_up "$asked"
    local wanted="nodes=$nodes"$'\n'"link=$link"$'\n'"storage_link=$storage_link"$'\n'"storage_latency_ms=$latency"
    if is_up; then
        [ "$(settings)" = "$wanted" ] || die "a cluster is already up with other settings ($(settings | tr '\n' ' '));" \
            "run 'bash $SELF down' first, or 'up' with those settings"
    else
        check_rate "$link" --link
        check_rate "$storage_link" --storage-link
        install
        UP_BUILDS=1
        mkdir -p "$STATE/log" "$STATE/run" "$STATE/fs/brick" "$STATE/fs/glusterd" "$STATE/fs/log" "$PFS"
        echo "$wanted" >"$settings_file"
    fi
    trap up_failed EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    local started=$SECONDS
    network_up
    root_up
    for host in $(hosts); do holder_up "$host"; done
    munge_up
    slurmctld_up
    for node in $(nodes); do slurmd_up "$node"; done
    storage_up
    for host in ctl $(nodes); do mount_pfs "$host"; done
    # what was set, not measured, for every run that reads the volume to record (shared_io.describe)
    inside ctl bash -c "printf '%s\n' \"\$1\" >$PFS/.hpcshuffle-storage.json" _ \
        "{\"by\": \"scripts/cluster.sh\", \"storage_link\": \"$storage_link\", \"server_read_latency_ms\": $latency, \"server_read_latency\": \"GlusterFS delay-gen on the brick: every read call waits this long; set, not measured\"}"
    slurm_ready
    # the tests of up_failed: a failure once everything is built
    [ -z "${HPCSHUFFLE_CLUSTER_UP_FAIL:-}" ] || die "failing at the end on purpose (HPCSHUFFLE_CLUSTER_UP_FAIL is set)"
    trap - EXIT INT TERM
    say "up in $((SECONDS - started)) s: $nodes nodes (links $link), login node ctl, storage node fs" \
        "(link $storage_link$( [ "$latency" = 0 ] || echo ", ${latency} ms per read set on its brick")) serving $PFS"
}

down() {
    need_root
    if ! is_up && [ ! -f "$settings_file" ]; then say "no cluster is up"; return; fi
    local ns pids="" root pid
    # every process of the cluster lives in one of its network namespaces, or is the root holder
    for ns in $(ip netns list | awk '{print $1}' | grep "^$NS" || true); do
        pids="$pids $(ip netns pids "$ns" 2>/dev/null || true)"
    done
    root=$(holder_pid root)
    if alive "$root"; then pids="$pids $root"; fi
    [ -z "${pids// /}" ] || kill -9 $pids 2>/dev/null || true
    for _ in $(seq 100); do  # killed processes linger a moment (as zombies, which alive() skips)
        local left=""
        for pid in $pids; do if alive "$pid"; then left="$left $pid"; fi; done
        [ -z "$left" ] && break
        sleep 0.1
    done
    [ -z "${left:-}" ] || say "processes still alive after SIGKILL:$left"
    # the FUSE mounts and the config's tmpfs lived in the holders' mount namespaces: gone with them
    for ns in $(ip netns list | awk '{print $1}' | grep "^$NS" || true); do
        ip netns del "$ns"
    done
    ip route del unreachable "$NET.0/24" 2>/dev/null || true
    unmount_netns_dir
    rmdir "$PFS" 2>/dev/null || true
    rm -f "$settings_file" "$STATE"/run/*
    rm -rf "$STATE/nodes" "$STATE/slurm"
    say "down (the storage node's brick, its volume definition and the logs stay in $STATE)"
}

status() {
    is_up || { echo "no cluster is up"; exit 1; }
    settings | tr '\n' ' '
    echo
    local host
    for host in $(hosts); do
        printf '%-6s %-12s holder %s\n' "$host" "$(address "$host")" "$(holder_alive "$host" && echo alive || echo DEAD)"
    done
    inside ctl sinfo -N -o '%N %t %C' || true
    for host in ctl $(nodes); do
        printf '%-6s %s %s\n' "$host" "$PFS" "$(holder_alive "$host" && pfs_answers "$host" && echo mounted || echo 'NOT mounted')"
    done
}

run() {
    is_up && holder_alive ctl || die "no cluster is up: start one with 'bash $SELF up' (as root)"
    case $PWD/ in
        /tmp/*) die "the current directory $PWD is under /tmp, which is node-local on the cluster's nodes;" \
                    "run from a directory every node sees (the repository, not a copy under /tmp)" ;;
    esac
    # the caller's environment (PATH with the venv, ...), Slurm's configuration from inside only;
    # libfabric (MPICH's OFI under srun, hpcshuffle/comm/netmod.py) over TCP only: the host's RDMA
    # devices are not namespaced, and the cluster's traffic stays on its own links
    inside ctl env SLURM_CONF=/etc/slurm/slurm.conf FI_PROVIDER=tcp bash -c 'cd "$1" && shift && exec "$@"' run "$PWD" "$@"
}

counters() {  # counters [HOST...]: bytes received and sent on each host's link (all hosts by default), no traffic
    is_up || die "no cluster is up"
    local host stats all wanted=("$@")
    all=$(hosts | tr '\n' ' ')
    [ $# -gt 0 ] || read -ra wanted <<<"$all"
    for host in "${wanted[@]}"; do
        [[ " $all" == *" $host "* ]] || die "no host $host in this cluster (hosts: $all)"
        # `ip netns exec` mounts a /sys of the host's network namespace: its eth0's kernel counters
        stats=/sys/class/net/eth0/statistics
        printf '%s %s %s\n' "$host" $(ip netns exec "${NS}$host" cat "$stats/rx_bytes" "$stats/tx_bytes")
    done
}

crash() {
    local node=${1:?crash NODE}
    holder_alive "$node" || die "$node is not up"
    local pids
    pids=$(ip netns pids "${NS}$node")
    kill -9 $pids
    say "killed $(wc -w <<<"$pids") processes of $node (slurmd, job steps, ranks, its $PFS client); 'up' brings it back"
}

link() {
    local node=${1:?link NODE down|up} state=${2:?link NODE down|up}
    [[ $state =~ ^(up|down)$ ]] || die "link: say down or up, got '$state'"
    ip -n "${NS}sw" link set "v$node" "$state" 2>/dev/null || die "$node has no link (is the cluster up, with that node?)"
    say "$node's link is $state"
}

storage() {
    case ${1:-} in
        stop) local pids
              pids=$(ns_pids fs glusterfsd glusterd)
              [ -z "$pids" ] || kill -9 $pids
              say "the storage node's GlusterFS server is stopped; 'storage start' or 'up' restarts it" ;;
        start) storage_up; say "the storage node serves $VOLUME again" ;;
        *) die "storage: say stop or start" ;;
    esac
}

# ---- inside the namespaces (internal) --------------------------------------------------------------

_root() {
    mount -t tmpfs -o mode=755,size=1m hpcshuffle-cluster-etc "$STATE/etc"
    write_config
    echo $$ >"$STATE/run/root.holder"
    exec sleep infinity
}

_holder() {
    local host=$1
    hostname "$host"
    umount -l /sys 2>/dev/null || true
    mount -t sysfs sysfs /sys  # this namespace's devices
    mount --bind "$STATE/etc/hosts" /etc/hosts
    # no nameserver: names resolve from hosts alone, and no DNS query goes to the machine's resolver
    mount --bind "$STATE/etc/resolv.conf" /etc/resolv.conf
    mkdir -p /etc/slurm
    mount --bind "$STATE/etc" /etc/slurm
    mount --bind "$STATE/nodes/$host/tmp" /tmp
    mount -t tmpfs -o mode=1777 "shm-$host" /dev/shm
    # UCX (and MPI) take processes with one boot_id for one host: give each node its own
    mount --bind "$STATE/nodes/$host/boot_id" /proc/sys/kernel/random/boot_id
    # slurmd wants the cgroup hierarchies, which the fresh sysfs does not show
    mount -t tmpfs -o mode=755 cgroup /sys/fs/cgroup
    for controller in cpu cpuacct cpuset memory devices freezer blkio pids; do
        mkdir -p "/sys/fs/cgroup/$controller"
        mount -t cgroup -o "$controller" cgroup "/sys/fs/cgroup/$controller" 2>/dev/null || true
    done
    mkdir -p /sys/fs/cgroup/systemd /sys/fs/cgroup/unified
    mount -t cgroup -o none,name=systemd cgroup /sys/fs/cgroup/systemd 2>/dev/null || true
    mount -t cgroup2 none /sys/fs/cgroup/unified 2>/dev/null || true
    if [ "$host" = fs ]; then  # glusterd's own state, sockets and logs, never a glusterd of the machine's
        mount -t tmpfs -o mode=755 run-fs /run
        mkdir -p /run/gluster /var/lib/glusterd /var/log/glusterfs
        mount --bind "$STATE/fs/glusterd" /var/lib/glusterd
        mount --bind "$STATE/fs/log" /var/log/glusterfs
    fi
    echo $$ >"$STATE/run/$host.holder"
    exec sleep infinity
}

main() {
    case "${1:-}" in
        up) shift; up "$@" ;;
        down) down ;;
        status) status ;;
        run) shift; [ "${1:-}" = -- ] && shift; [ $# -gt 0 ] || die "run: give a command, e.g. run -- sinfo"; run "$@" ;;
        counters) shift; counters "$@" ;;
        crash) need_root; crash "${2:-}" ;;
        link) need_root; link "${2:-}" "${3:-}" ;;
        storage) need_root; storage "${2:-}" ;;
        _root) _root ;;
        _holder) _holder "$2" ;;
        *) echo "usage: $0 up [--nodes K] [--link RATE] [--storage-link RATE] [--storage-latency-ms MS] | status | down" \
                "| run -- CMD... | counters [HOST...] | crash NODE | link NODE down|up | storage stop|start" >&2
           exit 2 ;;
    esac
}

# on one line: bash reads a script as it runs it, so an edit during a long `run` must not be read
main "$@"; exit $?
