"""The planned cache on node-local disk: the decisions cache_sim.py plans, replayed while training.

Under global shuffling a rank reads every sample it trains on from shared storage. With
`cache.policy` set it keeps up to `cache.samples` of them in a directory on its node-local
disk. The rank's whole read sequence follows from the plan, so the policy runs once, offline,
when training starts (`cache_sim.simulate` over the trace from the resume point on, from an empty
cache), and the loader replays its decisions:

- a planned hit reads the cached copy instead of shared storage;
- a planned admission writes the bytes just read from shared storage into the cache;
- a planned eviction deletes the copy once the batch holding its position has been loaded (no
  read of that copy comes later: the policy evicted it).

A copy is named by its sample id and the trace position that admitted it, so a sample evicted
and admitted again never shares a name with its older copy, and a deletion cannot remove a newer
one. A hit whose copy is not there yet (another loader worker is still writing it) reads shared
storage instead: slower, never wrong. `read_cache` in metrics.jsonl counts the planned hits.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import numpy as np

from hpcshuffle.plan import PlanSpec
from hpcshuffle.storage.cache_sim import rank_trace, simulate

NOT_CACHED = -1


def cache_file(root: Path, sample_id: int, copy: int) -> Path:
    """Where copy `copy` (the trace position that admitted it) of a sample lives."""
    return root / f"{sample_id:09d}.{copy}"


class PlannedCache:
    """One rank's cache directory and the planned decisions for its reads.

    Args:
        root: the directory (emptied now; removed by `close`).
        spec, shuffle: the run's plan parameters and strategy (one that reads shared storage).
        policy, capacity: see cache.POLICIES; capacity in samples.
        epochs: the run's epoch count; rank: whose reads.
        start_epoch, start_step: where this run starts (a resume); the cache starts empty there.
    """

    def __init__(
        self, root: Path, spec: PlanSpec, shuffle: str, policy: str, capacity: int, epochs: int, rank: int,
        start_epoch: int = 0, start_step: int = 0,
    ) -> None:
        started = time.perf_counter()
        self.root = Path(root)
        self.spec = spec
        self.policy, self.capacity = policy, capacity
        self.start_epoch = start_epoch
        self.skipped = start_step * spec.batch_size  # positions of the first epoch already trained
        trace, lengths = rank_trace(spec, shuffle, epochs, rank, start_epoch)
        trace = trace[self.skipped :]
        if len(lengths):
            lengths[0] -= self.skipped
        result = simulate(trace, capacity, policy, lengths, decisions=True)
        decisions = result.decisions
        positions = np.arange(len(trace))
        admitted = np.flatnonzero(decisions.admit)
        copies = _Copies(trace[admitted], admitted, len(trace))
        # per trace position: the copy a hit reads, the copy an admission writes (else NOT_CACHED)
        self.read_from = np.full(len(trace), NOT_CACHED, dtype=np.int64)
        self.read_from[decisions.hit] = copies.latest(trace[decisions.hit], positions[decisions.hit])
        self.write_as = np.where(decisions.admit, positions, NOT_CACHED)
        self.evict_pos = decisions.evict_pos
        self.evict_id = decisions.evict_id
        self.evict_copy = copies.latest(decisions.evict_id, decisions.evict_pos)
        self.planned_hit_ratio = result.hit_ratio
        self.planning_s = time.perf_counter() - started
        shutil.rmtree(self.root, ignore_errors=True)
        self.root.mkdir(parents=True)

    def _trace_range(self, epoch: int, step_start: int, step_stop: int) -> tuple[int, int]:
        """Trace positions of `epoch`'s order positions [step_start, step_stop)."""
        offset = (epoch - self.start_epoch) * self.spec.max_share - self.skipped
        if offset + step_start < 0:
            raise ValueError(f"epoch {epoch} position {step_start} comes before this run's start")
        return offset + step_start, offset + step_stop

    def decisions(self, epoch: int, first_step: int) -> tuple[np.ndarray, np.ndarray]:
        """(read_from, write_as) for the rank's order of `epoch` from step `first_step` on."""
        start, stop = self._trace_range(epoch, first_step * self.spec.batch_size, self.spec.max_share)
        return self.read_from[start:stop], self.write_as[start:stop]

    def hits(self, epoch: int, step: int) -> int:
        """Planned reads from the cache in batch `step` of `epoch`."""
        start, stop = self._trace_range(epoch, *self.spec.batch_bounds(step))
        return int((self.read_from[start:stop] != NOT_CACHED).sum())

    def evict(self, epoch: int, step: int) -> None:
        """Delete the copies evicted in batch `step` of `epoch`: call once that batch has been loaded."""
        start, stop = self._trace_range(epoch, *self.spec.batch_bounds(step))
        first, last = np.searchsorted(self.evict_pos, [start, stop])
        for sample_id, copy in zip(self.evict_id[first:last].tolist(), self.evict_copy[first:last].tolist()):
            cache_file(self.root, sample_id, copy).unlink(missing_ok=True)

    def close(self) -> None:
        """Delete the cache's directory and every copy in it."""
        shutil.rmtree(self.root, ignore_errors=True)


class _Copies:
    """The admissions of a trace, to find which copy of a sample is cached at a position."""

    def __init__(self, ids: np.ndarray, positions: np.ndarray, length: int) -> None:
        self.stride = length + 1
        self.keys = np.sort(ids * self.stride + positions)  # by id, then position

    def latest(self, ids: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """For each (id, position): the position of the id's last admission at or before it."""
        queries = ids * self.stride + positions
        index = np.searchsorted(self.keys, queries, side="right") - 1
        if (index < 0).any() or (self.keys[index] // self.stride != ids).any():
            raise AssertionError("a planned cache read or eviction has no admission before it")
        return self.keys[index] - ids * self.stride
