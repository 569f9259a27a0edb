# Process checks of scripts/slurm_local.sh, shared_fs.sh and cluster.sh (sourced, not run).

alive() {  # PID 1 may not reap here: a zombie is not alive
    local pid=${1:-}
    [ -n "$pid" ] && [ -e "/proc/$pid" ] && [ "$(ps -o stat= -p "$pid" | cut -c1)" != "Z" ]
}

# live processes named $1 in this network namespace: a daemon of the namespace cluster
# (scripts/cluster.sh) is not one that a script in the machine's own namespace can talk to
ours() {
    local pid here
    here=$(readlink /proc/self/ns/net)
    for pid in $(pgrep -x "$1" || true); do
        if alive "$pid" && [ "$(readlink "/proc/$pid/ns/net" 2>/dev/null)" = "$here" ]; then echo "$pid"; fi
    done
}
