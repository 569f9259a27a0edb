"""The plans of shuffle=streaming_py1e and streaming_py1br (plan/streaming.py) are a real StreamingDataset's
orders, id by id, and hpcshuffle's copy-free reading of Streaming's shuffle-quality score
(analysis/order_entropy.py) gives what Streaming's simulator gives on them. An MDS dataset of shards of G consecutive ids is read for a few epochs by M simulated nodes
of one rank each, under py1e and py1br, with Streaming's default shuffle block and with a small one: every
node gets, every epoch, the plan's order for its worker, and the shards its local directory holds at the end
are the ones `shard_cache_reads` counts. Runs Streaming in the peers' venv; skips without it (`make peers`).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from hpcshuffle.analysis.order_entropy import entropy_quality
from hpcshuffle.plan import PlanSpec, plan_epochs
from hpcshuffle.plan.streaming import PEERS_PYTHON, shard_cache_reads
from tests.conftest import NO_PEERS_VENV, REPO

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(not PEERS_PYTHON.exists(), reason=NO_PEERS_VENV)]
# 103 samples: 20 shards of 5 and one of 3; 3 nodes: shares of 34, 34 and 35, boundaries inside shards;
# a batch of 4 makes Streaming pad each node's 35 positions to 36 with a -1 it skips
SAMPLES, SHARD, NODES, SEED, BATCH, EPOCHS = 103, 5, 3, 17, 4, 3
VARIANTS = [(algo, block) for algo in ("py1e", "py1br") for block in (0, 20)]  # block 0: Streaming's default


def streaming_run(out: str, variants: list[list]) -> dict:
    """Runs in the peers' venv: MDS shards of SHARD consecutive ids in `out`/mds, then per (algo, block) of
    `variants` and per node, the ids a StreamingDataset yields it each epoch and the shards its local
    directory holds after the last one."""
    import torch.distributed as dist
    from streaming import MDSWriter, StreamingDataset

    remote = Path(out) / "mds"
    with MDSWriter(out=str(remote), columns={"id": "int"}, size_limit=None) as writer:
        # a size limit that SHARD samples fill exactly, so the writer starts a shard every SHARD ids
        writer.size_limit = writer.extra_bytes_per_shard + SHARD * (
            len(writer.encode_sample({"id": 0})) + writer.extra_bytes_per_sample)
        for sample_id in range(SAMPLES):
            writer.write({"id": sample_id})
    # Streaming initialises torch.distributed itself when WORLD_SIZE > 1 and waits for every rank. A group of
    # this one process stands in, so that the simulated nodes run one after another here: what a node reads
    # follows from RANK, WORLD_SIZE and LOCAL_WORLD_SIZE alone, and its only collectives are barriers.
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    runs = {}
    for algo, block in variants:
        orders, shards = [], []
        for node in range(NODES):
            os.environ.update(RANK=str(node), WORLD_SIZE=str(NODES), LOCAL_RANK="0", LOCAL_WORLD_SIZE="1")
            local = Path(out) / f"{algo}-{block}" / f"node{node}"
            dataset = StreamingDataset(remote=str(remote), local=str(local), shuffle=True, shuffle_algo=algo,
                                       shuffle_seed=SEED, batch_size=BATCH, shuffle_block_size=block or None)
            orders.append([[int(sample["id"]) for sample in dataset] for _ in range(EPOCHS)])
            shards.append(sorted(int(path.name.split(".")[1]) for path in local.glob("shard.*.mds")))
        runs[f"{algo}-{block}"] = {"orders": orders, "shards": shards}
    index = json.loads((remote / "index.json").read_text())
    return {"shard_samples": [shard["samples"] for shard in index["shards"]], "runs": runs}


@pytest.fixture(scope="module")
def streaming(tmp_path_factory) -> dict:
    """`streaming_run` of every variant, in the peers' venv (its file locks in a temporary directory)."""
    out = tmp_path_factory.mktemp("streaming_orders")
    code = ("import json, sys; from tests.e2e.test_streaming_orders import streaming_run; "
            "print(json.dumps(streaming_run(**json.loads(sys.argv[1]))))")
    done = subprocess.run([str(PEERS_PYTHON), "-c", code, json.dumps({"out": str(out), "variants": VARIANTS})],
                          cwd=REPO, env={**os.environ, "TMPDIR": str(out)}, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


def test_the_dataset_is_shards_of_consecutive_ids(streaming):
    assert streaming["shard_samples"] == [SHARD] * (SAMPLES // SHARD) + [SAMPLES % SHARD]


@pytest.mark.parametrize(("algo", "block"), VARIANTS, ids=[f"{algo}-block{block}" for algo, block in VARIANTS])
def test_each_node_gets_its_workers_planned_order_every_epoch(streaming, algo, block):
    run = streaming["runs"][f"{algo}-{block}"]
    spec = PlanSpec(SAMPLES, NODES, BATCH, 0.0, SEED, shard_samples=SHARD, shuffle_buffer=block)
    plans = list(plan_epochs(spec, f"streaming_{algo}", EPOCHS))
    for plan in plans:
        for node in range(NODES):
            assert plan.order[node].tolist() == run["orders"][node][plan.epoch], f"epoch {plan.epoch}, node {node}"
    # what each node's disk holds at the end: the shards its orders touched, each read once
    reads = shard_cache_reads(plans).sum(axis=0)
    for node, held in enumerate(run["shards"]):
        assert held == sorted(set(np.concatenate([plan.order[node] for plan in plans]) // SHARD))
        assert reads[node] == sum(streaming["shard_samples"][shard] for shard in held)


# Streaming's simulator scores epoch 0 of a run; a shape without padding, so both read the same ids
QUALITY_SHAPE = {"samples": 480, "nodes": 4, "batch": 6, "shard": 10, "block": 40, "seed": 5}


def simulator_quality(algo: str, samples: int, nodes: int, batch: int, shard: int, block: int, seed: int) -> float:
    """Runs in the peers' venv: Streaming's simulator's entropy score of `algo` on `nodes` nodes of one rank
    and one worker each (canonical nodes = nodes)."""
    from simulation.core.shuffle_quality import (
        get_entropy_shuffle_quality,
        get_partition_shard_info,
    )

    partition, shard_sizes, shard_of = get_partition_shard_info(samples, nodes, nodes, 1, 1, batch, shard,
                                                                remove_padding=True)
    return get_entropy_shuffle_quality(algo, partition, shard_sizes, shard_of, nodes, seed, block)


@pytest.fixture(scope="module")
def simulator_scores() -> dict:
    """`simulator_quality` of py1e and py1br, in one start of the peers' venv (Streaming's import is seconds)."""
    code = ("import json, sys; from tests.e2e.test_streaming_orders import simulator_quality; "
            "print(json.dumps({algo: simulator_quality(algo, **json.loads(sys.argv[1])) for algo in ('py1e', 'py1br')}))")
    done = subprocess.run([str(PEERS_PYTHON), "-c", code, json.dumps(QUALITY_SHAPE)], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.parametrize("algo", ["py1e", "py1br"])
def test_the_entropy_score_is_streaming_simulators_on_its_own_orders(simulator_scores, algo):
    shape = QUALITY_SHAPE
    spec = PlanSpec(shape["samples"], shape["nodes"], shape["batch"], 0.0, shape["seed"], shard_samples=shape["shard"],
                    shuffle_buffer=shape["block"])
    plan = next(plan_epochs(spec, f"streaming_{algo}", 1))
    ours = entropy_quality(plan.order, shape["batch"], shape["shard"])
    assert ours == pytest.approx(simulator_scores[algo], rel=1e-12)
