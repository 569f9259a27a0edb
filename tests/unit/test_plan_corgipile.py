"""CorgiPile's plan (plan/corgipile.py): whole blocks through a buffer, dealt to workers in runs."""

from __future__ import annotations

import numpy as np
import pytest

from hpcshuffle.errors import ConfigError
from hpcshuffle.plan import PlanSpec, plan_epochs
from hpcshuffle.plan.corgipile import BUFFER_BLOCKS
from tests.unit.test_config import run_config

BLOCK = 10


def stream(spec: PlanSpec, epoch: int = 0) -> np.ndarray:
    plan = list(plan_epochs(spec, "corgipile", epoch + 1))[epoch]
    return np.concatenate(plan.order)[: spec.num_samples]  # the padding repeats the stream's start


def test_a_one_block_buffer_streams_whole_blocks_in_a_new_order_each_epoch():
    spec = PlanSpec(400, 4, 8, 1.0, 5, shard_samples=BLOCK, shuffle_buffer=BLOCK)
    firsts = []
    for epoch in range(2):
        ids = stream(spec, epoch)
        assert sorted(ids.tolist()) == list(range(400))
        # every run of 10 positions holds one block's 10 ids: the buffer never mixes two blocks here ...
        blocks = ids.reshape(-1, BLOCK) // BLOCK
        assert (blocks == blocks[:, :1]).all()
        firsts.append(blocks[:, 0].tolist())
        # ... and shuffles inside the block
        assert any(run.tolist() != sorted(run.tolist()) for run in ids.reshape(-1, BLOCK))
    assert firsts[0] != firsts[1] and sorted(firsts[0]) == sorted(firsts[1]) == list(range(40))


def test_a_sample_leaves_with_its_buffer_fill():
    """A sample enters the buffer with its block and leaves with that fill: never more than one
    buffer (ten blocks here) from where its block's first sample came out."""
    spec = PlanSpec(2000, 8, 8, 1.0, 1, shard_samples=BLOCK)  # buffer 0: ten blocks
    ids = stream(spec)
    buffer = BUFFER_BLOCKS * BLOCK
    block_read_at = {}
    for position, sample in enumerate(ids.tolist()):
        block_read_at.setdefault(sample // BLOCK, position)
    late = [position - block_read_at[sample // BLOCK] for position, sample in enumerate(ids.tolist())]
    assert max(late) < buffer
    # a worker's batch therefore holds few blocks, the mark of block-wise shuffling (GS: ~8 of 8)
    batches = ids.reshape(-1, 8) // BLOCK
    assert np.mean([len(set(batch.tolist())) for batch in batches]) < 8


@pytest.mark.parametrize(("override", "message"), [
    ("shuffle=corgipile shuffle.block=0", r"shuffle.block must be >= 1 samples \(shuffle=corgipile reads blocks"),
    ("shuffle=local shuffle.block=10", r"shuffle.block only applies to the strategies that read blocks \(corgipile, "
                                      r"streaming_py1e, streaming_py1br\); shuffle=local does not"),
])
def test_block_settings_that_cannot_work_are_named(override, message):
    with pytest.raises(ConfigError, match=message):
        run_config(*override.split())
