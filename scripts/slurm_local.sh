#!/usr/bin/env bash
# A real single-node Slurm on this machine: for the `slurm` tests, and to try jobs/ on a laptop
# or a workstation before a cluster. Needs root (apt, daemons); Debian/Ubuntu packages.
#
#   bash scripts/slurm_local.sh start    # install if missing, configure, start munge + slurmctld + slurmd
#   bash scripts/slurm_local.sh status
#   bash scripts/slurm_local.sh stop     # stop what `start` started (a Slurm already running is left alone)
#
# `start` does nothing when a Slurm already answers (`sinfo`). The config it writes says so in
# its first line; an /etc/slurm/slurm.conf written by someone else is never overwritten.
set -euo pipefail

STATE=${HPCSHUFFLE_SLURM_STATE:-/var/tmp/hpcshuffle-slurm}
CONF=/etc/slurm/slurm.conf
MARK="# written by hpcshuffle scripts/slurm_local.sh"

answers() { timeout 10 sinfo -h >/dev/null 2>&1; }

source "$(dirname "${BASH_SOURCE[0]}")/processes.sh"  # alive, ours

install() {
    command -v slurmctld >/dev/null && command -v sbatch >/dev/null && command -v munged >/dev/null && return
    echo "installing slurmctld slurmd slurm-client munge (apt)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q slurmctld slurmd slurm-client munge >/dev/null 2>&1 \
        || { apt-get update -q >/dev/null && apt-get install -y -q slurmctld slurmd slurm-client munge >/dev/null; }
}

configure() {
    if [ -f "$CONF" ] && ! head -1 "$CONF" | grep -qF "$MARK"; then
        echo "$CONF exists and is not ours; start its daemons yourself" >&2
        exit 1
    fi
    local host cpus memory
    host=$(hostname -s)
    cpus=$(nproc)
    memory=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 * 9 / 10 ))
    mkdir -p /etc/slurm "$STATE/ctld" "$STATE/d" "$STATE/log"
    cat >"$CONF" <<EOF
$MARK
ClusterName=local
SlurmctldHost=${host}(127.0.0.1)
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/d
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd.log
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
MpiDefault=none
$(grep -v '^#' "$(dirname "${BASH_SOURCE[0]}")/slurm_common.conf")
NodeName=${host} NodeAddr=127.0.0.1 CPUs=${cpus} RealMemory=${memory} State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
EOF
}

# start munged unless one runs; the pid of one started here goes to $STATE/munged.pid for `stop`
start_munged() {
    local pid
    for pid in $(ours munged); do  # one of the namespace cluster's (cluster.sh) is not ours
        echo "using the munged already running here (pid $pid)"
        return
    done
    rm -f /run/munge/munged.pid
    runuser -u munge -- /usr/sbin/munged
    for _ in $(seq 50); do  # it detaches, then writes its pid file
        pid=$(cat /run/munge/munged.pid 2>/dev/null || true)
        if alive "$pid"; then echo "$pid" >"$STATE/munged.pid"; return; fi
        sleep 0.1
    done
    echo "munged did not start (no live pid in /run/munge/munged.pid)" >&2
    exit 1
}

start() {
    if answers; then
        echo "a Slurm is already running here: $(sinfo -h -o '%P %D %t' | head -1)"
        return
    fi
    install
    configure
    [ -s /etc/munge/munge.key ] || { mkdir -p /etc/munge; dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2>/dev/null; }
    chown munge:munge /etc/munge/munge.key && chmod 400 /etc/munge/munge.key
    mkdir -p /run/munge && chown munge:munge /run/munge
    start_munged
    slurmctld -i
    slurmd
    for _ in $(seq 50); do
        if answers && sinfo -h -o '%t' | grep -qE '^(idle|mix|alloc)'; then
            echo "Slurm up: $(sinfo -h -o '%P %D %t %C' | head -1) (logs in $STATE/log)"
            touch "$STATE/started"
            return
        fi
        sleep 0.2
    done
    echo "Slurm did not come up; see $STATE/log" >&2
    exit 1
}

stop() {
    [ -f "$STATE/started" ] || { echo "nothing started by this script"; return; }
    for daemon in slurmd slurmctld; do
        pid=$(cat "$STATE/$daemon.pid" 2>/dev/null || true)
        if alive "$pid"; then kill "$pid"; fi
    done
    pid=$(cat "$STATE/munged.pid" 2>/dev/null || true)  # only a munged that `start` started
    if alive "$pid" && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = munged ]; then kill "$pid"; fi
    rm -f "$STATE/munged.pid"
    rm -f "$STATE/started"
    echo "stopped"
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    status) if answers; then sinfo; else echo "no Slurm answers here"; exit 1; fi ;;
    *) echo "usage: $0 start|status|stop" >&2; exit 2 ;;
esac
