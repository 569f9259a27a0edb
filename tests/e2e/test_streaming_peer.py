"""MosaicML Streaming as the peer it is measured as (experiments/streaming_peer.py, in .venv-peers): the
dataset written as MDS shards holds every image's bytes unchanged, and the order Streaming gives two
ranks covers every sample once an epoch, with its default shuffle (py1e), and with py1br and a cache
smaller than the dataset while hpcshuffle's model trains on it; a cache too small for what the ranks
download ahead is refused, not left to hang. The comparison on the namespace cluster
is a benchmark, not a test."""

from __future__ import annotations

import json
import subprocess

import pytest

from hpcshuffle.files import read_jsonl
from tests.conftest import REPO, SMALL_SAMPLES

pytestmark = pytest.mark.e2e
PEERS = REPO / ".venv-peers" / "bin" / "python"
RANKS = 2


def peer(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    if not PEERS.exists():
        pytest.fail(f"{PEERS} is missing: `make peers` makes it (`make test` does first)")
    done = subprocess.run([str(PEERS), "experiments/streaming_peer.py", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0 or not check, done.stdout[-2000:] + done.stderr[-3000:]
    return done


@pytest.fixture(scope="module")
def mds(small_dataset, tmp_path_factory):
    out = tmp_path_factory.mktemp("streaming") / "mds"
    written = json.loads(peer("write", f"--root={small_dataset}", f"--out={out}", "--shard-bytes=8192").stdout)
    assert written["samples"] == SMALL_SAMPLES and written["shards"] > 4  # several shards to shuffle
    return out


def test_mds_shards_hold_each_image_unchanged_under_hpcshuffles_id(mds, small_dataset):
    check = ("import sys; from streaming import LocalDataset; from hpcshuffle.formats import get_format; "
             "d = LocalDataset(sys.argv[1]); c = get_format('imagefolder').scan(sys.argv[2], 'train'); "
             "bad = [i for i in range(len(c)) if (d[i]['id'], d[i]['label'], d[i]['image']) != "
             "(i, c.labels[i], c.path(i).read_bytes())]; print(len(d), bad)")
    done = subprocess.run([str(PEERS), "-c", check, str(mds), str(small_dataset)], capture_output=True, text=True,
                          timeout=300)
    assert done.stdout.split() == [str(SMALL_SAMPLES), "[]"], done.stderr[-2000:]
    again = peer("write", f"--root={small_dataset}", f"--out={mds}", check=False)
    assert again.returncode != 0 and "exists: Streaming would mix its shards" in again.stderr


def test_a_cache_smaller_than_what_the_ranks_read_ahead_is_refused(mds, tmp_path):
    """With a cache of 5 of the 24 shards, 3 of 6 runs of two ranks hung: Streaming evicted a shard one
    rank had downloaded ahead and another waited for it forever."""
    done = peer("run", f"--remote={mds}", f"--local={tmp_path}", f"--out={tmp_path}", "--cache-limit=40000",
                "--batch=8", check=False)
    assert done.returncode != 0 and "may read ahead (predownload 64 samples each" in done.stderr
    assert "Raise --cache-limit, or lower --predownload" in done.stderr


@pytest.mark.parametrize("variant", [["--shuffle-algo=py1e"],
                                     ["--shuffle-algo=py1br", "--cache-limit=150000", "--predownload=8",
                                      "--model=small_cnn", "--classes=4"]],
                         ids=["py1e", "py1br-cache-limited-training"])
def test_streamings_order_covers_every_sample_each_epoch(mds, tmp_path, variant):
    out = tmp_path / "run"
    found = json.loads(peer("run", f"--remote={mds}", f"--local={tmp_path / 'local'}", f"--out={out}",
                            f"--ranks={RANKS}", "--epochs=2", "--batch=8", *variant).stdout)
    padding = RANKS * -(-SMALL_SAMPLES // RANKS) - SMALL_SAMPLES
    for epoch in found["epochs"]:
        assert epoch["lost"] == 0, f"epoch {epoch['epoch']}: {epoch['lost']} samples reached no rank"
        assert epoch["repeated"] <= padding and len(set(epoch["per_rank"])) == 1  # equal shares, as ours
        if "--model=small_cnn" in variant:  # trained: the loop's phases are timed
            assert 0 < epoch["io_s"] + epoch["fwbw_s"] + epoch["allreduce_s"] <= epoch["epoch_s"] * RANKS
    # each epoch's wall-clock window (what the peers benchmark reads the storage link's counters at)
    # spans its slowest rank's epoch, and the second ends after the first
    first, second = (epoch["wall"] for epoch in found["epochs"])
    assert first["end"] - first["start"] >= found["epochs"][0]["epoch_s"] - 0.01 and first["end"] < second["end"]
    orders = [[row["ids"] for row in read_jsonl(path)] for path in sorted(out.glob("rank*.jsonl"))]
    assert len(orders) == RANKS and all(epochs[0] != epochs[1] for epochs in orders)  # a new order each epoch
