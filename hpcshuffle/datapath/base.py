"""The data-path interface, what every path shares, and the run's facts they are built from."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from hpcshuffle.comm.world import World, agree
from hpcshuffle.config import RunConfig
from hpcshuffle.files import atomic_write
from hpcshuffle.formats.catalog import Catalog
from hpcshuffle.formats.codec import Codec
from hpcshuffle.plan import EpochPlan, PlanSpec
from hpcshuffle.staging.stage import stage_stores
from hpcshuffle.storage.device_decode import DeviceDecoder
from hpcshuffle.storage.layout import rank_dir
from hpcshuffle.storage.loader import EpochOrder, Locator, Samples, make_loader
from hpcshuffle.storage.store import Store, StoreError
from hpcshuffle.training.metrics import RankEpoch


@dataclass(frozen=True)
class RunContext:
    """What a data path needs to know about the run.

    Attributes:
        spec: the plan's shape (workers are virtual workers in a simulation).
        plan_key: identifies the plan sequence in the stores' manifests.
        first_plan: the plan of the epoch the run starts (or resumes) in.
        start_step: the step it resumes at inside that epoch.
        device: where the model trains (and, with loader.decode=gpu, where batches are decoded).
    """

    world: World
    config: RunConfig
    spec: PlanSpec
    catalog: Catalog
    codec: Codec
    plan_key: str
    first_plan: EpochPlan
    start_step: int
    device: torch.device

    @property
    def pin_memory(self) -> bool:
        """Whether batches are copied to the device from pinned memory (on a GPU)."""
        return self.device.type == "cuda"


class DataPath:
    """Reads one rank's samples during an epoch; subclasses add the strategy's transfers.

    This base reads everything from `store_roots` (None: shared storage) in the plan's order and
    counts each trained sample as `counter`.
    """

    counter = "read_shared"
    store_roots: list[Path] | None = None
    cache_dir: Path | None = None

    def __init__(self, run: RunContext) -> None:
        self.run = run
        self.world, self.spec = run.world, run.spec
        self.order = EpochOrder()
        self.plan: EpochPlan | None = None

    def make_loader(self, batch_size: int | None = None):
        """The DataLoader over this path's sampler: call once the path knows where samples live.
        Its batches are the plan's steps (`batch_size`: the plan's b unless a step is larger)."""
        config = self.run.config
        samples = Samples(
            self.run.catalog, self.run.codec, self.store_roots, train=True, seed=config.seed,
            on_error=config.loader.on_error, io_threads=config.loader.io_threads,
            decode_threads=config.loader.decode_threads, cache_dir=self.cache_dir,
            raw_fraction=config.loader.raw_fraction,
        )
        self.loader = make_loader(samples, self.order, batch_size or self.spec.batch_size, config.loader.workers,
                                  pin_memory=self.run.pin_memory)
        self.decoder = (DeviceDecoder(self.run.codec, self.run.catalog, self.run.device, config.loader.on_error)
                        if config.loader.raw_fraction else None)

    def batches(self) -> Iterator:
        """The epoch's batches: (inputs, targets, sample ids, skipped) per step from `start_epoch`'s step;
        with loader.decode=gpu their inputs are already on the device."""
        if self.decoder is not None:
            return self.decoder.batches(iter(self.loader))
        return iter(self.loader)

    def start_epoch(self, plan: EpochPlan, first_step: int, row: RankEpoch) -> None:
        """Get ready to train on `plan` from step `first_step` (a resumed epoch starts later)."""
        self.plan = plan
        if self.store_roots:
            self.order.locate = Locator(self.store_roots)  # what the stores committed for this epoch
        self.set_order(plan, first_step)

    def set_order(self, plan: EpochPlan, first_step: int) -> None:
        """Point the loader at this rank's order of `plan` from step `first_step`'s first position on."""
        self.order.set_order(plan.order[self.world.rank][first_step * self.spec.batch_size :], plan.epoch)

    def before_step(self, step: int, row: RankEpoch, sample_ids: list[int]) -> None:
        """The batch of `step` is loaded: count it, start what must overlap forward/backward."""
        row.samples[self.counter] += len(sample_ids)

    def end_epoch(self, stopped: int | None, row: RankEpoch) -> None:
        """The epoch ended (`stopped`: the step a preemption stopped it at, else None)."""

    def record_extras(self, samples: dict) -> dict:
        """What this path adds to the epoch's metrics.jsonl record (`samples`: summed over ranks)."""
        return {}

    def audit(self, trained: list[int]) -> list[tuple[list[int], list[int]]]:
        """(ids held at the epoch's start, ids trained on) per worker this process trains."""
        return [([], trained)]

    def close(self) -> None:
        """Release what the path holds (its stores, cache, transfer threads); the base holds nothing."""
        pass


def open_store(run: RunContext, root: Path, target_ids: np.ndarray | range, headroom: float) -> Store:
    """Open the store at `root` and make it hold exactly `target_ids`, the plan's at the run's start,
    with room for `headroom` (the fraction of its partition an exchange brings in before it sends)."""
    storage = run.config.storage
    store, problem = None, None
    try:
        store = Store(root)
    except (StoreError, OSError) as err:
        problem = (
            f"storage.local_dir={storage.local_dir}: cannot open the node-local store {root} ({err}); point "
            "storage.local_dir at a writable directory on node-local disk"
        )
    agree(run.world, problem)
    stage_stores(
        run.world, [store], [target_ids], run.catalog, headroom=headroom, threads=storage.threads,
        max_bytes=storage.max_bytes, copy=storage.stage, progress=run.config.progress,
        timeout_s=run.config.world.timeout_s,
    )
    store.commit(run.first_plan.epoch, run.plan_key)
    return store


def rank_store_dir(run: RunContext, rank: int) -> Path:
    """The directory of `rank`'s node-local store under storage.local_dir."""
    return rank_dir(run.config.storage.local_dir, rank)


JOB_MARK = ".job"  # in each store: which job opened it last (check_node_shares)


def check_node_shares(run: RunContext, store: Store, node_ranks: Sequence[int]) -> None:
    """Collective: fail on every rank unless each rank sees, under its own storage.local_dir, the
    stores this job's other `node_ranks` opened, as ranks that read each other's stores must.

    Each rank marks its store with a token of this job, then looks for the token in its peers'.
    """
    world, local_dir = run.world, run.config.storage.local_dir
    token = world.comm.bcast(uuid.uuid4().hex if world.is_root else None, root=0)
    atomic_write(store.root / JOB_MARK, [token.encode()])
    world.comm.Barrier()
    problem = None
    for peer in node_ranks:
        mark = rank_store_dir(run, peer) / JOB_MARK
        try:
            seen = mark.read_text()
        except OSError:
            seen = None
        if seen != token:
            problem = (
                f"rank {world.rank} reads the stores of its node's ranks {list(node_ranks)}, but does not see "
                f"rank {peer}'s at {mark.parent} ({'another job marked it' if seen else 'not there'}): the ranks "
                f"of a node must share storage.local_dir={local_dir}, one node-local disk at one path; "
                "point it at such a path, or set storage.scope=rank"
            )
            break
    agree(world, problem)
