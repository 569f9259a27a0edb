"""The node-local store: durable adds, commit/reopen, orphans, locking and a damaged manifest."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest

from hpcshuffle.files import checksum_of
from hpcshuffle.formats.catalog import SampleMeta
from hpcshuffle.storage.layout import MANIFEST, sample_path
from hpcshuffle.storage.store import Store, StoreError


def meta(i: int, label: int | None = None, suffix: str = ".jpg") -> SampleMeta:
    return SampleMeta(i, f"train/class_{i % 3:03d}/{i:07d}{suffix}", i % 3 if label is None else label)


def payload(i: int) -> bytes:
    return f"sample {i} ".encode() * (i + 1)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "rank00000"


def files_in(store_root: Path) -> list[str]:
    return sorted(p.name for p in (store_root / "samples").iterdir())


def test_add_read_remove(root):
    with Store(root) as store:
        assert len(store) == 0 and store.ids() == set() and store.orphans == {}
        for i in (3, 7, 12):
            store.add(meta(i), payload(i))
        assert store.ids() == {3, 7, 12} and len(store) == 3
        assert 7 in store and 8 not in store
        assert store.read_bytes(7) == payload(7)
        stored = store.meta(12)
        assert (stored.relpath, stored.label) == (meta(12).relpath, meta(12).label)
        assert stored.nbytes == len(payload(12))
        assert stored.checksum == checksum_of([payload(12)])[0]
        assert store.intact(12)
        assert store.path(3) == root / "samples" / "000000003.jpg"
        assert store.path(3) == sample_path(root, 3, meta(3).relpath)
        store.remove(7)
        assert store.ids() == {3, 12}
        assert not (root / "samples" / "000000007.jpg").exists()
        assert files_in(root) == ["000000003.jpg", "000000012.jpg"]
        # re-adding an id overwrites its bytes
        store.add(meta(3), b"new bytes")
        assert store.read_bytes(3) == b"new bytes"


def test_suffix_follows_relpath(root):
    with Store(root) as store:
        store.add(SampleMeta(5, "train/a/x.PNG", 0), b"png")
        assert store.path(5).name == "000000005.PNG"


def test_no_temporaries_after_add(root):
    with Store(root) as store:
        for i in range(20):
            store.add(meta(i), payload(i), durable=(i % 2 == 0))
        store.sync()
        store.commit(0, "key")
        leftovers = [p.name for p in root.rglob("*") if ".tmp" in p.name]
        assert leftovers == []
        assert len(files_in(root)) == 20


def test_commit_and_reopen(root):
    with Store(root) as store:
        assert store.epoch is None and store.plan_key is None
        for i in range(10):
            store.add(meta(i, label=i * 2), payload(i))
        store.commit(4, "plan-abc")
    manifest = json.loads((root / MANIFEST).read_text())
    assert manifest["epoch"] == 4 and manifest["plan_key"] == "plan-abc"
    assert manifest["samples"]["3"] == [meta(3).relpath, 6, len(payload(3)), checksum_of([payload(3)])[0], 0]
    with Store(root) as again:
        assert again.epoch == 4 and again.plan_key == "plan-abc"
        assert again.ids() == set(range(10))
        assert again.orphans == {}
        for i in range(10):
            checksum, nbytes = checksum_of([payload(i)])
            assert again.meta(i) == replace(meta(i, label=i * 2), nbytes=nbytes, checksum=checksum)
            assert again.read_bytes(i) == payload(i)


def test_uncommitted_adds_are_orphans_kept_on_disk(root):
    with Store(root) as store:
        for i in range(4):
            store.add(meta(i), payload(i))
        store.commit(0, "k0")
        store.add(meta(10), payload(10))  # received after the commit, then a crash
        store.add(meta(11), payload(11))
    with Store(root) as again:
        assert again.ids() == {0, 1, 2, 3}
        assert set(again.orphans) == {10, 11}
        assert again.orphans[10] == root / "samples" / "000000010.jpg"
        # opening never deletes an orphan: its sender may have deleted its own copy already
        assert (root / "samples" / "000000010.jpg").read_bytes() == payload(10)
        assert (root / "samples" / "000000011.jpg").exists()
    # still there after a second open
    with Store(root) as third:
        assert set(third.orphans) == {10, 11}
        third.adopt(meta(10))
        assert 10 in third and third.read_bytes(10) == payload(10)
        assert set(third.orphans) == {11}
        third.commit(1, "k1")
    with Store(root) as fourth:
        assert fourth.ids() == {0, 1, 2, 3, 10}
        assert set(fourth.orphans) == {11}
        fourth.discard_orphans()
        assert fourth.orphans == {}
        assert not (root / "samples" / "000000011.jpg").exists()
        assert fourth.ids() == {0, 1, 2, 3, 10}
    with Store(root) as fifth:
        assert fifth.orphans == {}
        assert files_in(root) == [f"{i:09d}.jpg" for i in (0, 1, 2, 3, 10)]


def test_adopt_with_other_suffix_renames(root):
    with Store(root) as store:
        store.commit(0, "k")
        store.add(SampleMeta(2, "train/a/2.jpeg", 0), b"two")
    with Store(root) as again:
        again.adopt(SampleMeta(2, "train/a/2.png", 1))
        assert again.path(2).name == "000000002.png"
        assert again.read_bytes(2) == b"two"
        assert files_in(root) == ["000000002.png"]


def test_missing_file_forgotten_on_reopen(root):
    with Store(root) as store:
        for i in range(5):
            store.add(meta(i), payload(i))
        store.commit(0, "k")
    (root / "samples" / "000000002.jpg").unlink()
    with Store(root) as again:
        assert again.ids() == {0, 1, 3, 4}
        assert again.orphans == {}
        assert again.verify(range(5)).missing == [2]


def test_stray_temporaries_swept_on_open(root):
    with Store(root) as store:
        store.add(meta(1), payload(1))
        store.commit(0, "k")
    stray = root / "samples" / ".000000009.jpg.tmp12345"
    stray.write_bytes(b"half a file")
    with Store(root) as again:
        assert not stray.exists()
        assert again.ids() == {1} and again.orphans == {}


def test_verify_reports_missing_and_extra(root):
    with Store(root) as store:
        for i in (1, 2, 3, 5):
            store.add(meta(i), payload(i))
        diff = store.verify([2, 3, 4, 6])
        assert diff.missing == [4, 6]
        assert diff.extra == [1, 5]
        assert not diff.clean
        assert store.verify({1, 2, 3, 5}).clean
        # numpy-like ints and other iterables work too
        assert store.verify(iter([5, 3, 2, 1])).clean


def test_second_open_in_same_process_is_refused(root):
    first = Store(root)
    try:
        with pytest.raises(StoreError, match="in use"):
            Store(root)
        # the refusal must not have broken the first owner's store
        first.add(meta(1), payload(1))
        first.commit(0, "k")
    finally:
        first.close()
    # once closed, the store opens again
    with Store(root) as again:
        assert again.ids() == {1}


def test_open_from_another_process_is_refused(root):
    with Store(root):
        code = textwrap.dedent(
            f"""
            import sys
            from hpcshuffle.storage.store import Store, StoreError
            try:
                Store({str(root)!r})
            except StoreError as err:
                print(err)
                sys.exit(3)
            sys.exit(0)
            """
        )
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 3, proc.stderr
        assert "in use" in proc.stdout and str(root) in proc.stdout


@pytest.mark.parametrize(
    "content",
    ["{not json", '{"epoch": 0, "plan_key": "k", "samples": {"x": ["a.jpg", 0]}}',
     '{"epoch": 0, "plan_key": "k", "samples": {"1": ["a.jpg"]}}', "[]", ""],
)
def test_corrupt_manifest_names_the_file(root, content):
    with Store(root) as store:
        store.add(meta(1), payload(1))
        store.commit(0, "k")
    (root / MANIFEST).write_text(content)
    with pytest.raises(StoreError) as err:
        Store(root)
    assert str(root / MANIFEST) in str(err.value)
    # the sample files are left alone
    assert (root / "samples" / "000000001.jpg").exists()


def test_manifest_missing_keys_is_store_error(root):
    root.mkdir(parents=True)
    (root / MANIFEST).write_text('{"samples": {}}')
    with pytest.raises(StoreError, match="manifest"):
        Store(root)


def test_failed_open_releases_lock(root):
    root.mkdir(parents=True)
    (root / MANIFEST).write_text("{broken")
    with pytest.raises(StoreError) as first_error:
        Store(root)
    assert "unreadable" in str(first_error.value)
    (root / MANIFEST).unlink()  # the user repairs the store, in the same process
    with Store(root) as store:
        assert store.ids() == set()
