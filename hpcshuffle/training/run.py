"""A run's pieces built from its typed config, before the first epoch: the plan's shape (checked by
making a plan), what a checkpoint must match to resume the run, the plans from the epoch it starts
in, and the dataset format's codec. A run that cannot be built fails on every rank alike, named."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator

import numpy as np

from hpcshuffle.comm.world import World, node_size, on_all
from hpcshuffle.config import RunConfig
from hpcshuffle.errors import ConfigError
from hpcshuffle.formats import get_format
from hpcshuffle.formats.catalog import Catalog, DatasetError
from hpcshuffle.formats.codec import Codec
from hpcshuffle.plan import EpochPlan, PlanSpec, plan_epochs
from hpcshuffle.storage.shards import shard_samples


def plan_spec(world: World, config: RunConfig, catalog: Catalog, workers: int) -> PlanSpec:
    """Collective: the shape of the run's plans over `catalog` for `workers` workers (virtual ones
    in a simulation), with R ranks per node by storage.scope and G samples per shard by shuffle.unit."""
    ranks_per_node = config.ranks_per_node(*node_size(world, config.storage.ranks_per_node), workers)
    try:
        spec = PlanSpec(len(catalog), workers, config.batch_size, config.shuffle.q, config.seed,
                        ranks_per_node, config.storage.partition, shard_samples(config, catalog),
                        config.shuffle.buffer, catalog.labels if get_format(config.dataset.format).class_labels else None)
        next(plan_epochs(spec, config.shuffle.name, 1))  # a plan that cannot be made fails here, named
    except (ValueError, DatasetError) as err:
        raise ConfigError(str(err), collective=True) from err
    return spec


def run_identity(world: World, config: RunConfig, spec: PlanSpec, catalog: Catalog) -> dict:
    """What a checkpoint records of the run; resuming it needs the same checkpoint.FIXED entries."""
    return {
        "shuffle": config.shuffle.name, "num_samples": spec.num_samples, "num_ranks": spec.num_ranks,
        "ranks_per_node": spec.ranks_per_node, "processes": world.size, "batch_size": config.batch_size,
        "q": config.shuffle.q, "seed": config.seed, "partition": config.storage.partition,
        "shard_samples": spec.shard_samples, "shuffle_buffer": spec.shuffle_buffer,
        "dataset": catalog.fingerprint(),
    }


def replay_plans(spec: PlanSpec, shuffle: str, epochs: int, start_epoch: int,
                 replayed: Callable[[list[np.ndarray]], object] | None) -> Iterator[EpochPlan]:
    """The plans of epochs [start_epoch, epochs), after one replay of the plans from epoch 0: a resumed
    run's earlier epochs give the partition it resumes with and, through `replayed` (rank 0's pair
    mixing, analysis/quality.py), each earlier epoch's order, so the shuffle quality so far."""
    plans = plan_epochs(spec, shuffle, epochs)
    for past in itertools.islice(plans, start_epoch):
        if replayed is not None:
            replayed(past.order)
    return plans


def open_codec(world: World, config: RunConfig, catalog: Catalog) -> Codec:
    """Collective: the dataset format's codec over `catalog`; one rank's failure stops all of them."""
    dataset = config.dataset
    return on_all(world, lambda: get_format(dataset.format).codec(dataset.root, catalog, dataset.options),
                  DatasetError, ValueError, OSError)
