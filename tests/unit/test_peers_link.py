"""The peers benchmark's arithmetic (hpcshuffle/studies/peers.py): an epoch's bytes from the storage
link's cumulative counter read at its wall-clock window, and the cache a PLS node would keep."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpcshuffle.studies.peers import (
    Workload,
    counter_at,
    kept_fraction,
    streaming_arguments,
    window_bytes,
)

READINGS = [(100.0, 1_000), (100.5, 1_000), (101.0, 6_000), (101.5, 7_000)]


def test_the_counter_is_linear_between_readings_and_exact_at_them():
    assert counter_at(READINGS, 100.5) == 1_000
    assert counter_at(READINGS, 100.75) == pytest.approx(3_500)
    assert window_bytes(READINGS, 100.25, 101.5) == pytest.approx(6_000)


def test_a_window_outside_the_readings_is_refused_not_extrapolated():
    with pytest.raises(ValueError, match=r"outside the link's readings \(100.0-101.5\)"):
        window_bytes(READINGS, 99.0, 101.0)


def test_the_cached_variants_keep_what_a_pls_node_keeps_with_one_batch_read_ahead():
    index = {"shards": [{"raw_data": {"bytes": 1_000_000}}] * 300}
    work = Workload.sized(Path("ds"), Path("/pfs/mds"), index, nodes=2, epochs=3)
    assert work.cache_bytes == 165_000_000  # (1 + 0.1) · 300 MB / 2 nodes
    cached = streaming_arguments("streaming-py1br-cached", work)
    assert "--shuffle-algo=py1br" in cached and "--cache-limit=165000000" in cached and "--predownload=32" in cached
    assert not any(a.startswith(("--cache-limit", "--predownload")) for a in streaming_arguments("streaming-py1e", work))


def test_kept_is_the_share_of_a_ranks_samples_it_had_the_epoch_before():
    ids = {(0, 0): [1, 2, 3, 4], (0, 1): [5, 6, 7, 8],
           (1, 0): [4, 3, 2, 1], (1, 1): [5, 6, 1, 2]}  # rank 0 kept all, rank 1 half
    assert kept_fraction(ids) == 0.75
