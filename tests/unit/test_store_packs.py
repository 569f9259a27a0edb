"""Packs in the node-local store: many samples in one file, holes punched as they leave, the pack
deleted with its last one, locations published at commit, and uncommitted packs as orphans."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest
import xxhash

from hpcshuffle.formats.catalog import SampleMeta
from hpcshuffle.storage.loader import Locator
from hpcshuffle.storage.packs import release
from hpcshuffle.storage.store import Store, StoreError, published_locations
from tests.conftest import dead_pack_bytes

SIZE = 3 * 4096 + 100  # not a whole number of blocks: neighbours share blocks


def meta(i: int) -> SampleMeta:
    return SampleMeta(i, f"train/c/{i:05d}.jpg", i % 3, SIZE)


def data(i: int) -> bytes:
    return bytes([i % 251]) * SIZE


def packed(store: Store, ids: list[int], checked: bool = False) -> list[SampleMeta]:
    metas = [meta(i) for i in ids]
    if checked:
        metas = [replace(m, checksum=xxhash.xxh3_64_hexdigest(data(m.sample_id))) for m in metas]
    return store.add_pack(metas, b"".join(data(i) for i in ids), checked=checked)


def allocated(path: str) -> int:
    return os.stat(path).st_blocks * 512


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "rank00000"


def test_a_pack_holds_its_samples_and_hashes_them(root):
    with Store(root) as store:
        metas = packed(store, [5, 6, 7])
        assert store.ids() == {5, 6, 7}
        assert [m.checksum for m in metas] == [xxhash.xxh3_64_hexdigest(data(i)) for i in (5, 6, 7)]
        assert all(store.read_bytes(i) == data(i) and store.intact(i) for i in (5, 6, 7))
        location = store.location(6)
        assert (location.offset, location.nbytes) == (SIZE, SIZE) and location.path == store.file(6)
        assert len(list((root / "packs").iterdir())) == 1 and not list((root / "samples").iterdir())


def test_leaving_samples_are_punched_out_and_the_last_one_deletes_the_pack(root):
    with Store(root) as store:
        packed(store, [1, 2, 3, 4], checked=True)
        pack = store.file(1)
        store.commit(0, "k")
        full = allocated(pack)
        release(store.detach(2))
        release(store.detach(3))  # its gap joins 2's: the blocks they shared are freed too
        store.commit(1, "k")
        assert allocated(pack) <= full - (2 * SIZE - 2 * 4096)  # all but the blocks shared with 1 and 4
        assert dead_pack_bytes(root) == 0
        assert store.read_bytes(1) == data(1) and store.read_bytes(4) == data(4)
        release(store.detach(1))
        assert os.path.exists(pack)
        freed = store.detach(4)
        assert freed == pack  # the last one: the whole file goes
        release(freed)
        assert not os.path.exists(pack) and store.ids() == set()


def test_reopening_finds_packed_samples_and_their_published_locations(root):
    with Store(root) as store:
        packed(store, [10, 11])
        store.add(meta(12), data(12))
        store.commit(3, "k")
        before = store.locations()
    assert set(published_locations(root)) == {10, 11} and published_locations(root) == before
    locate = Locator([root])
    assert locate(12) is None and locate(11) == before[11]
    with Store(root) as again:
        assert again.ids() == {10, 11, 12} and again.orphans == {}
        assert again.read_bytes(11) == data(11) and again.intact(10)


def test_an_uncommitted_pack_is_orphans_adopted_or_discarded(root):
    with Store(root) as store:
        store.commit(0, "k")
        packed(store, [20, 21, 22])
        pack = store.file(20)
        packed(store, [30])
        other = store.file(30)
    with Store(root) as again:  # the pack was received after the last commit
        assert again.ids() == set() and set(again.orphans) == {20, 21, 22, 30}
        again.adopt(meta(21))
        again.discard_orphans()
        assert again.ids() == {21} and again.read_bytes(21) == data(21) and again.intact(21)
        assert os.path.exists(pack) and not os.path.exists(other)  # 30 alone: its pack went whole
        again.commit(1, "k")
        assert dead_pack_bytes(root) == 0


def test_a_crash_while_a_pack_is_freed_leaves_no_punched_sample_to_adopt(root):
    """Both samples of a pack leave: the first's range is punched, the second deletes the pack.
    Killed between the two, the pack is uncommitted; its punched sample must not come back as
    held (its bytes are zeros now; its other copy is the receiver's)."""
    with Store(root) as store:
        packed(store, [30, 31, 32])
        store.commit(0, "k")
        freed = [store.detach(i) for i in (31, 30, 32)]  # 31 between live ones: punched; 32 deletes the pack
        store.commit(1, "k")
        release(freed[0])  # killed here
    with Store(root) as again:
        assert again.ids() == set() and set(again.orphans) == {30, 31, 32}
        assert [again.adopt(meta(i)) for i in (30, 31, 32)] == [True, False, True]
        again.discard_orphans()
        assert again.ids() == {30, 32} and again.orphans == {}
        assert again.read_bytes(30) == data(30) and again.read_bytes(32) == data(32)
        again.commit(2, "k")
    assert dead_pack_bytes(root) == 0


def test_a_pack_the_manifest_names_but_is_gone_forgets_its_samples(root):
    with Store(root) as store:
        packed(store, [1, 2])
        store.add(meta(3), data(3))
        store.commit(0, "k")
        os.unlink(store.file(1))
    with Store(root) as again:
        assert again.ids() == {3}


def test_a_damaged_committed_pack_is_named(root):
    with Store(root) as store:
        packed(store, [1, 2])
        store.commit(0, "k")
        path = store.file(1)
    with open(path, "r+b") as pack:
        pack.truncate(SIZE)
    with pytest.raises(StoreError, match=rf"pack {path} is damaged .*; delete it, and the next start restages"):
        Store(root)


def test_a_pack_cut_short_is_named_by_the_reader(root):
    with Store(root) as store:
        packed(store, [1, 2])
        with open(store.file(1), "r+b") as pack:
            pack.truncate(SIZE + 10)
        with pytest.raises(StoreError, match=r"does not hold the \d+ bytes its manifest records for sample 2"):
            store.read_bytes(2)
        assert not store.intact(2) and store.intact(1)


def test_bytes_a_crash_left_in_a_committed_pack_are_freed_on_open(root):
    with Store(root) as store:
        packed(store, [1, 2, 3])
        store.commit(0, "k")
        store.detach(2)  # sent and committed without it, then killed before the punch
        store.commit(1, "k")
    assert dead_pack_bytes(root) > 0
    with Store(root) as again:
        assert again.ids() == {1, 3} and again.orphans == {}
        assert again.read_bytes(1) == data(1) and again.read_bytes(3) == data(3)
    assert dead_pack_bytes(root) == 0


def test_storing_a_held_sample_again_frees_its_old_copy(root):
    with Store(root) as store:
        store.add(meta(1), data(1))
        packed(store, [2, 3])
        old_pack = store.file(2)
        packed(store, [1, 2])  # restaged: 1 was a file, 2 was in the first pack
        assert not (root / "samples" / "000000001.jpg").exists()
        assert store.file(3) == old_pack and store.file(2) != old_pack
        store.add(meta(3), data(3))  # 3 back in a file of its own: the first pack is empty now
        assert not os.path.exists(old_pack) and store.location(3) is None
        assert all(store.read_bytes(i) == data(i) for i in (1, 2, 3))
        store.commit(0, "k")
    assert dead_pack_bytes(root) == 0
