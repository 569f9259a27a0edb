"""Honest shared reads (the page-cache guard), where a path is mounted, and what a run is told."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from hpcshuffle.config.groups import StorageConfig
from hpcshuffle.errors import ConfigError
from hpcshuffle.formats.codec import DatasetOptions
from hpcshuffle.formats.imagefolder import make_codec, scan
from hpcshuffle.formats.synthetic import synth_imagefolder
from hpcshuffle.storage.loader import Samples
from hpcshuffle.storage.shared_io import (
    SharedStorageError,
    check_shared_dir,
    describe,
    direct_io,
    estimated_bytes,
    mount_of,
    run_with_shared_volume,
    shared_volume,
    warnings_for,
    why_gone,
)

GIB = 2**30


def resident_pages(path: Path) -> int:
    """Pages of `path` in the page cache, as util-linux's fincore counts them."""
    out = subprocess.run(["fincore", "--bytes", "--noheadings", "--raw", "--output", "PAGES", str(path)],
                         capture_output=True, text=True, check=True).stdout
    return int(out.split()[0])


@pytest.fixture
def dataset(tmp_path) -> Path:
    return synth_imagefolder(tmp_path / "data", 12, num_classes=3, num_val_samples=3, image_size=16, progress=False)


def durable(path: Path) -> None:
    """Write the file's pages back, so DONTNEED may drop them (dirty pages stay until written)."""
    with open(path, "rb+") as file:
        os.fsync(file.fileno())


@pytest.mark.skipif(shutil.which("fincore") is None, reason="needs util-linux's fincore")
def test_an_uncached_read_leaves_no_page_of_the_file_in_the_page_cache(dataset):
    catalog = scan(dataset, "train")
    path = catalog.path(0)
    durable(path)
    assert replace(catalog, uncached=False).read_bytes(0) == path.read_bytes()
    assert resident_pages(path) > 0  # a plain read leaves the file cached: the guard has work to do
    assert catalog.uncached  # the default
    assert catalog.read_bytes(0) == path.read_bytes()
    # path.read_bytes() above cached it again: read through the catalog last, then count
    catalog.read_bytes(0)
    assert resident_pages(path) == 0


def mountinfo(tmp_path: Path, *lines: str) -> str:
    table = tmp_path / "mountinfo"
    table.write_text("".join(f"{line}\n" for line in lines))
    return str(table)


def test_mount_of_picks_the_innermost_mount_and_reads_escaped_paths(tmp_path):
    table = mountinfo(
        tmp_path,
        "21 1 254:0 / / rw,relatime - ext4 /dev/vda rw",
        "40 21 0:44 / /mnt/my\\040data rw - fuse.glusterfs host:/gv0 rw,user_id=0",
        "41 21 0:45 / /mnt rw - tmpfs tmpfs rw",
    )
    assert mount_of("/mnt/my data/imagenet/train", table).fs_type == "fuse.glusterfs"
    assert mount_of("/mnt/my data/imagenet", table).kind == "network"
    assert mount_of("/mnt/other", table).kind == "memory"
    assert mount_of("/home/user", table).point == Path("/")
    assert mount_of("/home/user", table).kind == "local"


def test_shared_dir_must_exist_and_be_a_mount(tmp_path):
    assert "does not exist here" in check_shared_dir(tmp_path / "nowhere")
    bare = check_shared_dir(tmp_path)
    assert "is not a mounted file system" in bare and "scripts/shared_fs.sh start" in bare
    assert "storage.shared_dir=null" in bare
    assert check_shared_dir(Path("/proc")) is None  # a mount point that can be listed


def test_storage_gone_is_told_apart_from_a_bad_sample(dataset, tmp_path):
    catalog = scan(dataset, "train")
    assert why_gone(catalog) is None
    assert "is no longer mounted" in why_gone(replace(catalog, mount=tmp_path))
    assert "cannot be read" in why_gone(replace(catalog, root=tmp_path / "unmounted"))


def test_a_read_of_storage_that_went_away_fails_even_when_skipping(dataset, tmp_path):
    catalog = replace(scan(dataset, "train"), mount=tmp_path)  # tmp_path is no mount: "gone"
    codec = make_codec(dataset, catalog, DatasetOptions("none", None))
    catalog.path(0).unlink()
    samples = Samples(catalog, codec, None, train=False, on_error="skip")
    with pytest.raises(SharedStorageError, match=r"shared storage went away during the run: .* no longer mounted"):
        samples.load((0, 0))
    # storage still there: a missing file is the sample's problem, and skip mode skips it
    assert Samples(replace(catalog, mount=None), codec, None, train=False, on_error="skip").load((0, 0)) is None


def test_estimated_bytes_scales_the_probed_sizes(tmp_path):
    root = tmp_path / "flat"
    for label in range(2):
        (root / "train" / f"c{label}").mkdir(parents=True)
        for index in range(100):
            (root / "train" / f"c{label}" / f"{index:03d}.jpg").write_bytes(b"x" * 1000)
    assert estimated_bytes(scan(root, "train"), probes=16) == 200 * 1000


def test_warnings_name_local_disk_and_potential_caching(dataset):
    catalog = scan(dataset, "train")
    kind = mount_of(dataset).kind
    cached = warnings_for(replace(catalog, uncached=False), memory_bytes=64 * GIB)
    assert any(note.startswith("potential caching") and "storage.shared_reads=uncached" in note for note in cached)
    assert not any("potential caching" in note for note in warnings_for(catalog, memory_bytes=64 * GIB))
    assert not any("potential caching" in note for note in warnings_for(replace(catalog, uncached=False), 1))
    if kind == "local":
        assert any("this node's own disk" in note for note in cached)
    assert describe(catalog) == {"root": str(dataset), "mount": str(mount_of(dataset).point),
                                 "fs": mount_of(dataset).fs_type, "kind": kind, "reads": "uncached",
                                 "direct_io": False}


def test_storage_config_checks_shared_reads():
    assert StorageConfig().shared_reads == "uncached"
    with pytest.raises(ConfigError, match=r"storage.shared_reads must be one of \('uncached', 'cached'\)"):
        StorageConfig(shared_reads="sometimes")


def test_direct_io_is_read_from_the_fuse_clients_command_line(tmp_path):
    def process(pid: int, *args: str) -> None:
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "cmdline").write_bytes(b"\0".join(arg.encode() for arg in args) + b"\0")

    process(10, "/usr/sbin/glusterfs", "--direct-io-mode=enable", "--volfile-server=host", "/mnt/a")
    process(11, "/usr/sbin/glusterfs", "--volfile-server=host", "/mnt/b")
    (tmp_path / "self").mkdir()
    assert direct_io(Path("/mnt/a"), proc=str(tmp_path))
    assert not direct_io(Path("/mnt/b"), proc=str(tmp_path))
    assert not direct_io(Path("/mnt/c"), proc=str(tmp_path))


def fake_shared_fs(tmp_path: Path, mounted: bool) -> tuple[Path, Path]:
    """A stand-in for scripts/shared_fs.sh that logs each action: `status` fails until `start`
    ran (or at once when `mounted`), `start` prints the mount point."""
    log, flag = tmp_path / "actions", tmp_path / "mounted"
    if mounted:
        flag.touch()
    script = tmp_path / "shared_fs.sh"
    script.write_text(f'echo "$1" >> {log}\n'
                      f'case "$1" in\n'
                      f'  status) [ -e {flag} ] && echo {tmp_path} || {{ echo "not mounted" >&2; exit 1; }} ;;\n'
                      f'  start) touch {flag}; echo {tmp_path} ;;\n'
                      f'  stop) rm -f {flag} ;;\n'
                      f'esac\n')
    return script, log


@pytest.mark.parametrize("mounted", [False, True])
def test_a_volume_started_for_a_with_is_stopped_after_it_and_one_found_is_left(tmp_path, monkeypatch, mounted):
    script, log = fake_shared_fs(tmp_path, mounted)
    monkeypatch.setattr("hpcshuffle.storage.shared_io.SHARED_FS", script)
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    with shared_volume() as (mount, how):
        assert mount == tmp_path and how == ("mounted" if mounted else "started now")
    assert log.read_text().split() == (["status"] if mounted else ["status", "start", "stop"])
    assert (tmp_path / "mounted").exists() == mounted


@pytest.mark.parametrize(("mounted", "root"), [(False, True), (True, False), (False, False)])
def test_a_command_run_with_the_volume_is_told_its_mount_and_how_it_came(tmp_path, monkeypatch, mounted, root):
    """`python -m hpcshuffle.storage.shared_io COMMAND` (scripts/demo.sh): COMMAND runs inside
    shared_volume, learns the mount and how it came from its environment, and its exit code is kept."""
    script, log = fake_shared_fs(tmp_path, mounted)
    monkeypatch.setattr("hpcshuffle.storage.shared_io.SHARED_FS", script)
    monkeypatch.setattr(os, "geteuid", lambda: 0 if root else 1000)
    seen = tmp_path / "seen"
    told = f'echo "$HPCSHUFFLE_SHARED_MOUNT|$HPCSHUFFLE_SHARED_HOW" > {seen}; exit 3'
    code = run_with_shared_volume(["sh", "-c", told])
    assert code == 3
    mount, how = seen.read_text().rstrip("\n").split("|")
    if mounted or root:
        assert (mount, how) == (str(tmp_path), "mounted" if mounted else "started now")
    else:
        assert mount == "" and how == "not mounted (starting it needs root; running as uid 1000)"
    assert log.read_text().split() == (["status", "start", "stop"] if root else ["status"])


def test_the_module_without_a_command_says_how_to_call_it():
    """The entry scripts/demo.sh uses (running a command is the test above: from a shell it would
    start the real volume as root)."""
    entry = [sys.executable, "-m", "hpcshuffle.storage.shared_io"]
    missing = subprocess.run(entry, capture_output=True, text=True, check=False)
    assert missing.returncode == 2 and "usage: python -m hpcshuffle.storage.shared_io COMMAND" in missing.stderr
    helped = subprocess.run([*entry, "--help"], capture_output=True, text=True, check=False)
    assert helped.returncode == 0 and "HPCSHUFFLE_SHARED_MOUNT" in helped.stdout
