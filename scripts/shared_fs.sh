#!/usr/bin/env bash
# A real shared file system on this machine: one GlusterFS volume, served over TCP by a local
# glusterd and mounted with the FUSE client, as a parallel file system's clients mount theirs. For
# the `gluster` tests and to read datasets from a shared mount as a cluster's PFS would serve them.
# Needs root (apt, daemons, mount); Debian/Ubuntu packages glusterfs-server glusterfs-client.
#
#   shared=$(bash scripts/shared_fs.sh start)   # install if missing, start glusterd, create/start the volume, mount
#   shared=$(bash scripts/shared_fs.sh status)  # exit 1 when the volume is not mounted (and answering) there
#   bash scripts/shared_fs.sh stop              # unmount and stop what `start` started; keeps brick and volume
#
# `start` and `status` print exactly one line on stdout, the mount path; everything else goes to
# stderr. `start` is idempotent: when the volume is already mounted there it only reports it.
#
# Settings (environment):
#   HPCSHUFFLE_SHARED_MOUNT=/mnt/hpcshuffle-shared  where the volume is mounted
#   HPCSHUFFLE_SHARED_STATE=/var/tmp/hpcshuffle-gluster  brick, logs, and the marks of what `start` started
#   HPCSHUFFLE_SHARED_DIRECT_IO=0  mount without direct-io-mode=enable: keep the kernel page cache
#
# The volume's client-side caching translators are off (io-cache, read-ahead, quick-read,
# stat-prefetch/md-cache, open-behind, readdir-ahead), and the mount uses direct-io-mode=enable: the
# client cannot cache the dataset at all, as a PFS client whose dataset is larger than its memory,
# and every read goes to the brick over TCP. With HPCSHUFFLE_SHARED_DIRECT_IO=0 the mount keeps the
# kernel page cache (as a Lustre client does); hpcshuffle's storage.shared_reads=uncached then drops
# each file's pages after reading it (posix_fadvise DONTNEED), which works on this mount too.
# write-behind is off too: writing 100 KB files is no slower without it, and a write's error then
# comes from write().
# network.ping-timeout is 10 s, so a server that goes away gives errors instead of a 42 s hang.
#
# `start` uses a glusterd already running here, and `stop` leaves such a glusterd running; `stop`
# does nothing unless the state dir marks that `start` mounted or started something. It works while
# processes read the mount (lazy unmount; their reads then fail). The brick and the volume definition
# stay, so the next `start` is fast and finds the files written before.
set -euo pipefail

STATE=${HPCSHUFFLE_SHARED_STATE:-/var/tmp/hpcshuffle-gluster}
MOUNT=${HPCSHUFFLE_SHARED_MOUNT:-/mnt/hpcshuffle-shared}
MOUNT=${MOUNT%/}
DIRECT_IO=${HPCSHUFFLE_SHARED_DIRECT_IO:-1}
VOLUME=hpcshuffle
BRICK=$STATE/brick
LOG=$STATE/log
# volume options: the client's caches off, a dead server noticed within seconds (shared with cluster.sh)
source "$(dirname "${BASH_SOURCE[0]}")/gluster_options.sh"
source "$(dirname "${BASH_SOURCE[0]}")/processes.sh"  # alive, ours

say() { echo "shared_fs: $*" >&2; }
die() { say "$*"; exit 1; }

gl() { timeout 20 gluster --mode=script "$@"; }
answers() { timeout 10 gluster --mode=script volume list >/dev/null 2>&1; }

# "fstype source" of what is mounted at $MOUNT (the top of the stack), empty when nothing is
mounted_as() {
    awk -v m="$MOUNT" '$5 == m { for (i = 7; i <= NF; i++) if ($i == "-") { t = $(i + 1) " " $(i + 2); break } }
                       END { if (t != "") print t }' /proc/self/mountinfo
}

# ours: the volume is mounted at $MOUNT and the mount answers (a dead server's mount does not)
volume_mounted() {
    local what
    what=$(mounted_as)
    [ "${what%% *}" = fuse.glusterfs ] && [ "${what##*[:/]}" = "$VOLUME" ] && timeout 10 stat -t "$MOUNT/." >/dev/null 2>&1
}

glusterds() { ours glusterd; }

# the FUSE client serving $MOUNT: the glusterfs process whose command line ends with the mount path
client_pid() {
    local pid
    for pid in $(ours glusterfs); do
        if tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null | tail -1 | grep -qxF "$MOUNT"; then echo "$pid"; fi
    done
}

# the brick process of our volume (glusterfsd --volfile-id hpcshuffle.<host>.<brick path, / as ->)
brick_pids() {
    local pid brick=${BRICK#/}
    for pid in $(ours glusterfsd); do
        if tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null | grep -qxF "$VOLUME.$(hostname).${brick//\//-}"; then echo "$pid"; fi
    done
}

install() {
    command -v glusterd >/dev/null && command -v gluster >/dev/null && command -v mount.glusterfs >/dev/null && return
    say "installing glusterfs-server glusterfs-client (apt)"
    export DEBIAN_FRONTEND=noninteractive
    { apt-get install -y -q glusterfs-server glusterfs-client >/dev/null 2>&1 \
        || { apt-get update -q >/dev/null && apt-get install -y -q glusterfs-server glusterfs-client >/dev/null; }; } \
        || die "apt-get install glusterfs-server glusterfs-client failed"
    if ! command -v glusterd >/dev/null || ! command -v mount.glusterfs >/dev/null; then
        die "glusterd / mount.glusterfs still missing after apt-get install"
    fi
}

start_glusterd() {
    local running pid
    running=$(glusterds)
    if [ -f "$STATE/glusterd.pid" ] && grep -qxF "$(cat "$STATE/glusterd.pid")" <<<"$running"; then
        say "glusterd started earlier by this script runs (pid $(cat "$STATE/glusterd.pid"))"
    elif [ -n "$running" ]; then
        rm -f "$STATE/glusterd.pid"  # ours died; this one is someone else's
        say "using the glusterd already running here (pid $(echo "$running" | tr '\n' ' ' | sed 's/ $//')); stop leaves it running"
    else
        mkdir -p /var/log/glusterfs /var/lib/glusterd
        # --no-daemon: it does not detach; setsid and no inherited stdout, so callers' pipes close
        setsid glusterd --no-daemon --log-file="$LOG/glusterd.log" </dev/null >>"$LOG/glusterd.out" 2>&1 &
        pid=$!
        echo "$pid" >"$STATE/glusterd.pid"
        say "started glusterd (pid $pid, log $LOG/glusterd.log)"
    fi
    for _ in $(seq 60); do
        answers && return
        if [ -z "$running" ] && ! alive "$(cat "$STATE/glusterd.pid")"; then
            rm -f "$STATE/glusterd.pid"
            die "glusterd exited at start; see $LOG/glusterd.log and $LOG/glusterd.out"
        fi
        sleep 0.5
    done
    die "glusterd does not answer after 30 s; see $LOG/glusterd.log"
}

# set the OPTIONS that differ (one glusterd transaction each, so only those)
set_options() {
    local current i value
    current=$(gl volume get "$VOLUME" all) || die "gluster volume get $VOLUME all failed"
    for ((i = 0; i < ${#OPTIONS[@]}; i += 2)); do
        value=$(awk -v k="${OPTIONS[i]}" '$1 == k {print $2; exit}' <<<"$current")
        [ "$value" = "${OPTIONS[i + 1]}" ] && continue
        gl volume set "$VOLUME" "${OPTIONS[i]}" "${OPTIONS[i + 1]}" >/dev/null \
            || die "gluster volume set $VOLUME ${OPTIONS[i]} ${OPTIONS[i + 1]} failed"
        say "set $VOLUME ${OPTIONS[i]} ${OPTIONS[i + 1]} (was ${value:-unset})"
    done
}

volume_up() {
    local host info status
    host=$(hostname)
    getent hosts "$host" >/dev/null || die "this machine's hostname $host does not resolve (add it to /etc/hosts)"
    if info=$(gl volume info "$VOLUME" 2>/dev/null); then
        grep -qE "^Brick[0-9]+: [^:]+:$BRICK\$" <<<"$info" \
            || die "a volume $VOLUME exists here whose brick is not $BRICK:"$'\n'"$info"
    else
        mkdir -p "$BRICK"
        say "creating volume $VOLUME on $host:$BRICK"
        gl volume create "$VOLUME" "$host:$BRICK" force >&2 || die "gluster volume create $VOLUME failed"
    fi
    set_options
    status=$(gl volume info "$VOLUME" | awk -F': ' '/^Status:/ {print $2}')
    if [ "$status" != Started ]; then
        gl volume start "$VOLUME" >/dev/null || die "gluster volume start $VOLUME failed"
        touch "$STATE/volume.started"
        say "started volume $VOLUME"
    elif [ -z "$(brick_pids)" ]; then  # started, but its brick process is gone: restart it
        gl volume start "$VOLUME" force >/dev/null || die "gluster volume start $VOLUME force failed"
        touch "$STATE/volume.started"
        say "restarted the brick of volume $VOLUME"
    fi
}

mount_volume() {
    local what opts=log-file=$LOG/client.log
    what=$(mounted_as)
    if [ -n "$what" ]; then
        if [ "${what%% *}" = fuse.glusterfs ] && [ "${what##*[:/]}" = "$VOLUME" ] && [ -f "$STATE/mounted" ]; then
            # our volume, but its mount does not answer (its client or server went away): remount
            say "$MOUNT is mounted but does not answer; unmounting it"
            umount -l "$MOUNT" || die "cannot unmount the stale $MOUNT"
        else
            die "$MOUNT is already a mount point ($what), not ours or not answering; set HPCSHUFFLE_SHARED_MOUNT elsewhere"
        fi
    fi
    mkdir -p "$MOUNT"
    if [ "$DIRECT_IO" = 1 ]; then opts=$opts,direct-io-mode=enable; fi
    mount -t glusterfs -o "$opts" "$(hostname):/$VOLUME" "$MOUNT" >&2 \
        || die "mount -t glusterfs $(hostname):/$VOLUME $MOUNT failed; see $LOG/client.log"
    for _ in $(seq 50); do
        if volume_mounted; then
            echo "$opts" >"$STATE/mounted"
            say "mounted $VOLUME at $MOUNT (-o $opts)"
            return
        fi
        sleep 0.2
    done
    die "$MOUNT does not answer after mounting; see $LOG/client.log"
}

start() {
    if volume_mounted; then
        say "volume $VOLUME is mounted at $MOUNT$( [ -f "$STATE/mounted" ] || echo ' (not by this script)')"
        if [ "$(id -u)" = 0 ] && answers; then set_options; fi
        echo "$MOUNT"
        return
    fi
    [ "$(id -u)" = 0 ] || die "needs root to start GlusterFS and mount $MOUNT (running as uid $(id -u))"
    mkdir -p "$STATE" "$LOG"
    install
    start_glusterd
    volume_up
    mount_volume
    echo "$MOUNT"
}

status() {
    if volume_mounted; then
        echo "$MOUNT"
    else
        local what
        what=$(mounted_as)
        if [ -n "$what" ]; then die "$MOUNT is mounted ($what) but is not volume $VOLUME or does not answer"; fi
        die "volume $VOLUME is not mounted at $MOUNT"
    fi
}

stop() {
    if [ ! -f "$STATE/mounted" ] && [ ! -f "$STATE/volume.started" ] && [ ! -f "$STATE/glusterd.pid" ]; then
        say "nothing started by this script"
        return
    fi
    [ "$(id -u)" = 0 ] || die "needs root to stop GlusterFS (running as uid $(id -u))"
    local client="" pid
    if [ -f "$STATE/mounted" ]; then
        client=$(client_pid)
        if [ -n "$(mounted_as)" ]; then
            # busy (a process reads it): detach it now; its reads fail once the client below is gone
            umount "$MOUNT" 2>/dev/null || umount -l "$MOUNT" || say "could not unmount $MOUNT"
        fi
        for pid in $client; do
            if alive "$pid"; then kill "$pid"; fi
        done
        rm -f "$STATE/mounted"
        say "unmounted $MOUNT"
    fi
    if [ -f "$STATE/volume.started" ] || [ -f "$STATE/glusterd.pid" ]; then
        # the brick must not outlive a glusterd we stop; a volume we started is stopped either way
        if answers; then
            gl volume stop "$VOLUME" force >/dev/null 2>&1 || say "gluster volume stop $VOLUME failed"
        fi
        for pid in $(brick_pids); do kill "$pid"; done
        rm -f "$STATE/volume.started"
        say "stopped volume $VOLUME (brick and volume definition kept)"
    fi
    if [ -f "$STATE/glusterd.pid" ]; then
        pid=$(cat "$STATE/glusterd.pid")
        if alive "$pid"; then
            kill "$pid"
            for _ in $(seq 50); do alive "$pid" || break; sleep 0.2; done
            if alive "$pid"; then kill -9 "$pid"; fi
        fi
        rm -f "$STATE/glusterd.pid"
        say "stopped glusterd (pid $pid)"
    fi
    for pid in $client; do  # a client still serving a lazily unmounted reader
        if alive "$pid"; then kill -9 "$pid"; fi
    done
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    status) status ;;
    *) echo "usage: $0 start|status|stop" >&2; exit 2 ;;
esac
