"""The planned cache on disk: its replayed decisions always find the copy they read, stay
within capacity, count the simulated hits, and resume from an empty cache; the loader reads
copies, writes admissions, and falls back to shared storage."""

from __future__ import annotations

import pytest

from hpcshuffle.formats.codec import DatasetOptions
from hpcshuffle.formats.imagefolder import make_codec, scan
from hpcshuffle.formats.synthetic import synth_imagefolder
from hpcshuffle.plan import PlanSpec
from hpcshuffle.storage.cache_sim import rank_trace, simulate
from hpcshuffle.storage.loader import SampleKey, Samples
from hpcshuffle.storage.node_cache import NOT_CACHED, PlannedCache, cache_file

SPEC = PlanSpec(num_samples=230, num_ranks=3, batch_size=8, seed=5)
EPOCHS = 4
trace_all, _ = rank_trace(SPEC, "global", EPOCHS, rank=1)
cache_ids = trace_all.reshape(EPOCHS, SPEC.max_share)  # rank 1's order per epoch


def replay(cache: PlannedCache, epochs: range, first_step: int = 0) -> int:
    """Load every batch as the trainer does, checking each planned read finds its copy; the hits."""
    hits = 0
    for epoch in epochs:
        read_from, write_as = cache.decisions(epoch, first_step if epoch == epochs[0] else 0)
        offset = (first_step if epoch == epochs[0] else 0) * SPEC.batch_size
        for step in range(first_step if epoch == epochs[0] else 0, SPEC.iterations):
            start, stop = SPEC.batch_bounds(step)
            for position in range(start - offset, stop - offset):
                sample_id = int(cache_ids[epoch][position + offset])
                if read_from[position] != NOT_CACHED:
                    assert cache_file(cache.root, sample_id, read_from[position]).exists(), (epoch, position)
                    hits += 1
                if write_as[position] != NOT_CACHED:
                    cache_file(cache.root, sample_id, write_as[position]).write_bytes(b"x")
            assert cache.hits(epoch, step) == sum(read_from[start - offset : stop - offset] != NOT_CACHED)
            cache.evict(epoch, step)
            assert len(list(cache.root.iterdir())) <= cache.capacity, f"epoch {epoch} step {step}: over capacity"
    return hits


@pytest.mark.parametrize("policy", ["lru", "nopfs", "reuse_count", "reuse_distance"])
def test_replayed_decisions_find_their_copies_and_count_the_simulated_hits(tmp_path, policy):
    cache = PlannedCache(tmp_path / "cache", SPEC, "global", policy, 20, EPOCHS, rank=1)
    hits = replay(cache, range(EPOCHS))
    assert hits == simulate(trace_all, 20, policy).hits > 0
    cache.close()
    assert not (tmp_path / "cache").exists()


def test_a_resumed_run_plans_from_an_empty_cache_at_its_step(tmp_path):
    stale = tmp_path / "cache" / "000000007.12"
    stale.parent.mkdir()
    stale.write_bytes(b"from the run before")
    cache = PlannedCache(tmp_path / "cache", SPEC, "global", "reuse_distance", 20, EPOCHS, rank=1, start_epoch=2, start_step=3)
    assert not stale.exists(), "the cache must start empty"
    rest = trace_all[2 * SPEC.max_share + 3 * SPEC.batch_size :]
    assert replay(cache, range(2, EPOCHS), first_step=3) == simulate(rest, 20, "reuse_distance").hits
    with pytest.raises(ValueError, match="comes before this run's start"):
        cache.decisions(1, 0)


def test_the_loader_reads_copies_writes_admissions_and_falls_back_to_shared_storage(tmp_path):
    catalog = scan(synth_imagefolder(tmp_path / "src", 6, 2, image_size=12, progress=False), "train")
    samples = Samples(catalog, make_codec(catalog.root, catalog, DatasetOptions("none")), None, train=False,
                      cache_dir=tmp_path / "cache")
    (tmp_path / "cache").mkdir()
    original = catalog.path(3).read_bytes()
    assert samples.load(SampleKey(0, 3, admit=17)) == original
    assert cache_file(tmp_path / "cache", 3, 17).read_bytes() == original
    catalog.path(3).unlink()  # shared storage lost it: only the cached copy can serve the read
    assert samples.load(SampleKey(1, 3, cached=17)) == original
    assert samples.load(SampleKey(1, 4, cached=40)) == catalog.path(4).read_bytes(), "no copy: read shared storage"
    assert samples[SampleKey(1, 3, cached=17)][2] == 3, "decoded from the cached copy"
