"""Shared storage as the run sees it: where the dataset is mounted, reads that measure it, and
the warnings a run owes its user when its shared reads are really memory reads.

Global shuffling's cost is reading every sample from the parallel file system every epoch. On
one node the kernel keeps what an epoch read in its page cache and the next epoch reads memory,
so a run would report global shuffling as cheap as local shuffling (DLIO calls this "potential
caching"). `storage.shared_reads`:

- `uncached` (default): every read of shared storage drops the file's pages once it is read
  (posix_fadvise DONTNEED, files.read_chunks), so each epoch goes back to the file system. The
  file system's own client caches are the mount's business (scripts/shared_fs.sh turns
  GlusterFS's off).
- `cached`: the page cache is left alone, as a plain read would; the run warns when the
  dataset fits in the node's memory, unless the mount bypasses the page cache (direct I/O).

`storage.shared_dir` names the mount of the shared file system; a run checks that it is mounted
before it writes or lists anything there, and a read that fails because the file system went
away mid-run raises `SharedStorageError` naming it, instead of blaming the sample.
"""

from __future__ import annotations

import inspect
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from hpcshuffle.config.groups import CACHED, UNCACHED
from hpcshuffle.formats.catalog import Catalog, DatasetError

# file systems whose files live on other machines: reading them is reading shared storage
NETWORK_TYPES = ("nfs", "nfs4", "lustre", "gpfs", "beegfs", "ceph", "cifs", "smb3", "9p", "fuse.glusterfs",
                 "fuse.sshfs", "fuse.ceph", "fuse.juicefs", "fuse.s3fs", "fuse.gcsfuse")
MEMORY_TYPES = ("tmpfs", "ramfs")  # the page cache *is* the storage: nothing to drop
START_HINT = "bash scripts/shared_fs.sh start"
SHARED_FS = Path(__file__).resolve().parents[2] / "scripts" / "shared_fs.sh"  # in a source checkout


class SharedStorageError(DatasetError):
    """Shared storage is not mounted, not readable, or went away during the run."""


@dataclass(frozen=True)
class Mount:
    """The mount a path lies on, from /proc/self/mountinfo."""

    point: Path
    fs_type: str
    source: str

    @property
    def kind(self) -> str:
        """"network", "memory" or "local" (a disk of this node)."""
        if self.fs_type in NETWORK_TYPES:
            return "network"
        return "memory" if self.fs_type in MEMORY_TYPES else "local"


def _unescape(field: str) -> str:
    """mountinfo writes space, tab, newline and backslash in paths as octal escapes."""
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(code, char)
    return field


def mount_of(path: str | os.PathLike, mountinfo: str = "/proc/self/mountinfo") -> Mount:
    """The innermost mount holding `path` (resolved; it need not exist yet)."""
    target = Path(os.path.realpath(path))
    best = Mount(Path("/"), "unknown", "unknown")
    with open(mountinfo) as table:
        for line in table:
            before, _, after = line.partition(" - ")
            point = Path(_unescape(before.split()[4]))
            fs_type, source = (after.split() + ["", ""])[:2]
            if (point == target or point in target.parents) and len(point.parts) >= len(best.point.parts):
                best = Mount(point, fs_type, source)  # later lines mount over earlier ones
    return best


def direct_io(point: Path, proc: str = "/proc") -> bool:
    """Whether the FUSE client serving the mount at `point` bypasses the page cache (GlusterFS's
    `direct-io-mode=enable`: its process's command line says so and ends with the mount point)."""
    for cmdline in Path(proc).glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes().decode(errors="replace").split("\0")
        except OSError:  # a process that ended while we looked
            continue
        args = [arg for arg in args if arg]
        if args and args[-1] == str(point) and "--direct-io-mode=enable" in args:
            return True
    return False


def shared_mount(start: bool = True) -> tuple[Path | None, str]:
    """(the GlusterFS mount of scripts/shared_fs.sh, "mounted" or "started now"), or (None, why not).

    Asks `shared_fs.sh status`; when the volume is not mounted and `start` and we are root, starts
    it (`shared_fs.sh start`: a minute or more the first time, it may install packages).
    """
    if not SHARED_FS.is_file():
        return None, f"{SHARED_FS} is not here (it comes with a source checkout)"
    status = subprocess.run(["bash", str(SHARED_FS), "status"], capture_output=True, text=True, timeout=120,
                            check=False)
    if status.returncode == 0:
        return Path(status.stdout.strip()), "mounted"
    why = status.stderr.strip().splitlines()[-1:] or [f"shared_fs.sh status exited {status.returncode}"]
    if not start or os.geteuid() != 0:
        return None, f"{why[0]} (starting it needs root; running as uid {os.geteuid()})"
    print(f"{why[0]}; starting it: {START_HINT}", file=sys.stderr, flush=True)
    started = subprocess.run(["bash", str(SHARED_FS), "start"], stdout=subprocess.PIPE, text=True, timeout=900,
                             check=False)
    if started.returncode != 0:
        return None, f"{START_HINT} failed (exit {started.returncode}; its messages are above)"
    return Path(started.stdout.strip()), "started now"


@contextmanager
def shared_volume(start: bool = True) -> Iterator[tuple[Path | None, str]]:
    """`shared_mount` for the length of a `with`: a volume started here is stopped on the way out
    (`shared_fs.sh stop`), one that was mounted already is left as it was found."""
    mount, how = shared_mount(start)
    try:
        yield mount, how
    finally:
        if how == "started now":
            subprocess.run(["bash", str(SHARED_FS), "stop"], capture_output=True, text=True, timeout=300, check=False)


def run_with_shared_volume(command: list[str]) -> int:
    """Run `command` inside `shared_volume()`, telling it the mount in HPCSHUFFLE_SHARED_MOUNT (empty
    when there is none) and how it came in HPCSHUFFLE_SHARED_HOW ("mounted", "started now", or why
    there is none); returns its exit code. A Ctrl-C ends it and still stops a volume started here
    (so does a SIGTERM, run as `python -m hpcshuffle.storage.shared_io COMMAND [ARG...]`)."""
    with shared_volume() as (mount, how):
        env = {**os.environ, "HPCSHUFFLE_SHARED_MOUNT": "" if mount is None else str(mount),
               "HPCSHUFFLE_SHARED_HOW": how}
        try:
            return subprocess.run(command, env=env, check=False).returncode
        except KeyboardInterrupt:
            return 128 + signal.SIGINT


def check_shared_dir(shared_dir: Path) -> str | None:
    """Why `storage.shared_dir` cannot be used on this node, or None."""
    fix = f"start the shared file system ({START_HINT}) or set storage.shared_dir=null to read dataset.root as it is"
    if not shared_dir.is_dir():
        return f"storage.shared_dir {shared_dir} does not exist here; {fix}"
    if not os.path.ismount(shared_dir):
        return (f"storage.shared_dir {shared_dir} is not a mounted file system (a bare directory on "
                f"{mount_of(shared_dir).point}); {fix}")
    try:
        os.listdir(shared_dir)
    except OSError as err:
        return f"storage.shared_dir {shared_dir} cannot be read ({err.strerror}); {fix}"
    return None


def why_gone(catalog: Catalog) -> str | None:
    """Why the catalog's storage as a whole is unreachable now (its mount gone, its root
    unreadable), or None when it is there and a failed read is the sample's own problem."""
    if catalog.mount is not None and catalog.mount != Path("/") and not os.path.ismount(catalog.mount):
        return f"{catalog.mount} is no longer mounted"
    try:
        os.listdir(catalog.root)
    except OSError as err:
        return f"{catalog.root} cannot be read ({err.strerror})"
    return None


def check_still_there(catalog: Catalog, err: OSError) -> None:
    """After a failed read of shared storage: raise SharedStorageError if the storage went away."""
    gone = why_gone(catalog)
    if gone:
        raise SharedStorageError(
            f"shared storage went away during the run: {gone} (reading {catalog.root}: {err.strerror or err}); "
            f"bring it back (e.g. {START_HINT}) and run the same command again: the run resumes from its "
            "last checkpoint and the node-local stores are checked before training"
        ) from None


def estimated_bytes(catalog: Catalog, probes: int = 64) -> int:
    """The split's size in bytes, from `probes` evenly spaced samples (a full stat of a large
    dataset would cost the file system one request per sample)."""
    count = len(catalog)
    picked = sorted({i * count // min(probes, count) for i in range(min(probes, count))})
    sizes = [catalog.stat(sample_id).nbytes for sample_id in picked]
    return sum(sizes) * count // max(len(sizes), 1)


def node_memory_bytes(meminfo: str = "/proc/meminfo") -> int:
    """This node's memory in bytes (MemTotal of /proc/meminfo); OSError if it has none."""
    with open(meminfo) as info:
        for line in info:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    raise OSError(f"no MemTotal in {meminfo}")


# at a volume's root: what the storage's owner set for it (scripts/cluster.sh writes one), recorded as is
SETTINGS_FILE = ".hpcshuffle-storage.json"


def describe(catalog: Catalog) -> dict:
    """What the run records of its shared storage (metrics.jsonl's `shared`), with the settings
    its owner set for it (`set`: a shaped link, a delay per read on the server), when it says."""
    mount = mount_of(catalog.root)
    record = {"root": os.path.abspath(catalog.root), "mount": str(mount.point), "fs": mount.fs_type,
              "kind": mount.kind, "reads": UNCACHED if catalog.uncached else CACHED,
              "direct_io": direct_io(mount.point)}
    try:
        record["set"] = json.loads((mount.point / SETTINGS_FILE).read_text())
    except (OSError, ValueError):
        pass
    return record


def warnings_for(catalog: Catalog, memory_bytes: int) -> list[str]:
    """What a user must know before trusting the run's shared-storage times."""
    mount, notes = mount_of(catalog.root), []
    if mount.kind == "memory":
        notes.append(f"dataset.root {catalog.root} is on {mount.fs_type} ({mount.point}): its reads are memory "
                     "reads, not shared storage's")
    elif mount.kind == "local":
        notes.append(f"dataset.root {catalog.root} is on this node's own disk ({mount.fs_type} at {mount.point}), "
                     f"not on shared storage: shared reads are local-disk reads; {START_HINT} mounts a real "
                     "shared file system, then set storage.shared_dir=<its mount>")
    size = estimated_bytes(catalog)
    if not catalog.uncached and mount.kind != "memory" and size < memory_bytes and not direct_io(mount.point):
        notes.append(f"potential caching: the dataset (~{size / 2**30:.2f} GiB) fits in this node's memory "
                     f"({memory_bytes / 2**30:.0f} GiB) and storage.shared_reads=cached lets the page cache serve "
                     "later epochs, so their shared reads time memory; set storage.shared_reads=uncached")
    return notes


__all__ = [
    "Mount", "SharedStorageError", "check_shared_dir", "check_still_there",
    "describe", "direct_io", "estimated_bytes", "mount_of", "node_memory_bytes", "run_with_shared_volume",
    "shared_mount", "shared_volume", "warnings_for", "why_gone",
]


if __name__ == "__main__":  # scripts/demo.sh: `python -m hpcshuffle.storage.shared_io COMMAND [ARG...]`
    USAGE = ("usage: python -m hpcshuffle.storage.shared_io COMMAND [ARG...]\n\n"
             + inspect.cleandoc(run_with_shared_volume.__doc__))
    if sys.argv[1:2] in (["-h"], ["--help"]):
        print(USAGE)
    elif len(sys.argv) < 2:
        print(USAGE, file=sys.stderr)
        sys.exit(2)
    else:
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))  # unwinds: the volume stops
        sys.exit(run_with_shared_volume(sys.argv[1:]))
