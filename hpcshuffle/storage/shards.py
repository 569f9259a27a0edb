"""Shards of a packed dataset as a run sees them: the plan's G (samples per shard) read from the
catalog when shuffle.unit=shard, and what those shards and the shuffle buffer amount to in bytes
(the plans themselves: plan/shards.py)."""

from __future__ import annotations

from hpcshuffle.config import RunConfig
from hpcshuffle.errors import ConfigError
from hpcshuffle.formats.catalog import Catalog, ShardedCatalog
from hpcshuffle.plan import PlanSpec


def shard_samples(config: RunConfig, catalog: Catalog) -> int:
    """The plan's G: samples per shard with shuffle.unit=shard (the packed dataset's), shuffle.block for a
    strategy that reads blocks of consecutive ids (CorgiPile) from a dataset of single samples, else 1."""
    if config.shuffle.unit != "shard":
        return config.shuffle.block if config.strategy.blocks else 1
    if not isinstance(catalog, ShardedCatalog):
        raise ConfigError(
            f"shuffle.unit=shard moves whole shards, but dataset.format={config.dataset.format} keeps one record "
            "per sample: pack the dataset into shards (hpcshuffle pack) and use dataset.format=webdataset, "
            "or set shuffle.unit=sample"
        )
    return catalog.uniform_shard_samples()


def shard_summary(spec: PlanSpec, catalog: ShardedCatalog) -> str:
    """What shuffle.unit=shard plans move and what the buffer's order stands for, in bytes."""
    sample_bytes = sum(catalog.sample_nbytes(i) for i in range(len(catalog))) / len(catalog)
    buffer = spec.shuffle_buffer
    order = (f"shuffle.buffer={buffer} samples: the order a streaming reader holding "
             f"{buffer * sample_bytes / 1e6:.1f} MB would give (the loader reads each sample from the "
             "node-local store when its turn comes)"
             if buffer else "shuffle.buffer=0: a full shuffle of what each node holds")
    return (f"shuffle.unit=shard: whole shards of {spec.shard_samples} samples "
            f"({spec.shard_samples * sample_bytes / 1e6:.1f} MB) are staged and moved as packs; {order}")
