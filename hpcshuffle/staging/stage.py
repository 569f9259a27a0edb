"""Staging: bring each rank's node-local store to what the plan says it holds at an epoch.

The store is a cache of the plan, so first staging, resuming an interrupted staging, restaging
for another worker count, recovering after a crash and repairing a damaged store are one
operation: decide what differs (`assess`), check the node has room for it (`check_capacity`),
take what other ranks' stores hold from them over MPI (`peer_moves`), then copy only what no
store holds from shared storage and drop the rest (`execute`). Nothing is deleted before its
new owner has made its copy durable, so a crash at any point leaves every sample in a store.

Every staged file's size, xxh3 checksum and source mtime go into the store's manifest. A later
run re-hashes the staged copies (catching corruption) and stats the sources (catching a dataset
changed since staging), and copies only what is missing or wrong.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from tqdm import tqdm

from hpcshuffle.comm.exchange import Scheduler
from hpcshuffle.comm.world import World, agree
from hpcshuffle.formats.catalog import Catalog, DatasetError, ShardedCatalog, SourceFile
from hpcshuffle.plan import Exchange
from hpcshuffle.storage.capacity import NodeDemand, check_capacity, gib
from hpcshuffle.storage.shared_io import check_still_there
from hpcshuffle.storage.store import Store, StoreError


@dataclass(frozen=True)
class StageWork:
    """What staging must do on one rank, decided before anything is copied."""

    target: list[int]
    sources: dict[int, SourceFile]  # stat of every target's source file
    to_copy: list[int]  # missing, changed or corrupt
    to_remove: list[int]  # held but not in the target (another rank's, or no longer planned)
    changed: list[int]  # staged, but the source's size or mtime differs now
    corrupt: list[int]  # staged, but the copy no longer matches its checksum
    adopted: int  # uncommitted files of the target (received before a crash) taken back
    from_peers: int = 0  # of to_copy, taken from other ranks' stores before `execute`

    @property
    def copy_bytes(self) -> int:
        """Bytes of the samples to copy, by their source files' sizes."""
        return sum(self.sources[i].nbytes for i in self.to_copy)

    @property
    def target_bytes(self) -> int:
        """Bytes of the whole target, by its source files' sizes."""
        return sum(source.nbytes for source in self.sources.values())


@dataclass(frozen=True)
class StageReport:
    """What staging did to one store (`copied` and `copied_bytes` from shared storage)."""

    copied: int  # from shared storage
    copied_bytes: int
    removed: int
    changed: int
    corrupt: int
    adopted: int
    seconds: float
    from_peers: int = 0


def replica_ids(num_samples: int, local_rank: int, local_size: int) -> range:
    """A node's full replica, split over its ranks: local rank l keeps ids l, l+L, l+2L, ...

    `loader.Samples` finds sample i in the store of local rank i % L.
    """
    return range(local_rank, num_samples, local_size)


def stat_sources(catalog: Catalog, sample_ids: Iterable[int], threads: int) -> dict[int, SourceFile]:
    """Size and mtime of each sample's source, statted in parallel (parallel file systems reward it)."""
    sample_ids = list(sample_ids)

    def stat(sample_id: int) -> SourceFile | None:
        try:
            return catalog.stat(sample_id)
        except FileNotFoundError:
            return None
        except OSError as err:
            check_still_there(catalog, err)
            raise DatasetError(f"cannot stat {catalog.path(sample_id)}: {err.strerror}; check its permissions") from None

    with ThreadPoolExecutor(threads) as pool:
        stats = dict(zip(sample_ids, pool.map(stat, sample_ids)))
    missing = [catalog.relpaths[i] for i, info in stats.items() if info is None]
    if missing:
        check_still_there(catalog, FileNotFoundError(f"{len(missing)} files not found"))
        raise DatasetError(
            f"{len(missing)} source files disappeared from {catalog.root} since it was listed "
            f"(e.g. {missing[:3]}); is the dataset being modified?"
        )
    return stats


def assess(store: Store, target_ids: Iterable[int], catalog: Catalog, threads: int = 8) -> StageWork:
    """Compare the store with its target: what to copy, what to remove, what went bad."""
    target = sorted({int(i) for i in target_ids})
    sources = stat_sources(catalog, target, threads)
    wanted = set(target)
    # every uncommitted file of this dataset is taken back, not just the wanted ones: after a
    # crash past an exchange's barrier it may be the only copy of a sample another rank wants
    orphans = [i for i in sorted(store.orphans) if i < len(catalog)]
    orphan_sources = stat_sources(catalog, [i for i in orphans if i not in wanted], threads)
    taken = {
        sample_id for sample_id in orphans
        if store.adopt(replace(catalog.meta(sample_id),
                               source_mtime_ns=(sources.get(sample_id) or orphan_sources[sample_id]).mtime_ns))
    }
    adopted = len(wanted & taken)
    store.discard_orphans()  # ids beyond this dataset, and packed ones whose bytes were freed before a crash
    staged = sorted(wanted & store.ids())
    changed = [
        i for i in staged
        if (store.meta(i).nbytes, store.meta(i).source_mtime_ns) != (sources[i].nbytes, sources[i].mtime_ns)
    ]
    unchanged = sorted(set(staged) - set(changed))
    with ThreadPoolExecutor(threads) as pool:
        corrupt = [i for i, ok in zip(unchanged, pool.map(store.intact, unchanged)) if not ok]
    return StageWork(
        target=target,
        sources=sources,
        to_copy=sorted((wanted - store.ids()) | set(changed) | set(corrupt)),
        to_remove=sorted(store.ids() - wanted),
        changed=changed,
        corrupt=corrupt,
        adopted=adopted,
    )


def demand(host: str, store: Store, work: StageWork, headroom: float) -> NodeDemand:
    """This rank's claim: what it must copy, plus `headroom` (a fraction of its partition's bytes)
    of room for what an exchange brings in before it deletes what it sent."""
    room_bytes = int(headroom * work.target_bytes)
    held = sum(store.meta(i).nbytes for i in store.ids())
    freed = sum(store.meta(i).nbytes for i in work.to_remove) + sum(
        store.meta(i).nbytes for i in work.to_copy if i in store
    )
    free = shutil.disk_usage(store.root).free
    return NodeDemand(host, work.copy_bytes + room_bytes, freed, held, free)


def peer_moves(wants: list[np.ndarray], offers: list[np.ndarray], nodes: list[int] | None = None) -> Exchange | None:
    """Moves that give each rank the samples it wants from another rank offering them: the lowest
    such rank on the wanting rank's node (`nodes[r]`: rank r's node; MPI between a node's ranks
    goes through shared memory, not the network), else the lowest such rank anywhere.

    Pure; every rank computes it from the same gathered lists. Samples no rank offers are left
    for `execute` to copy from shared storage. None when nothing moves.
    """
    nodes = list(range(len(offers))) if nodes is None else nodes
    holders: dict[int, list[int]] = {}
    for rank, offered in enumerate(offers):
        for sample_id in offered.tolist():
            holders.setdefault(sample_id, []).append(rank)
    rows = []
    for rank, wanted in enumerate(wants):
        for sample_id in wanted.tolist():
            offering = holders.get(sample_id, [rank])
            if rank not in offering:
                rows.append((next((r for r in offering if nodes[r] == nodes[rank]), offering[0]), rank, sample_id))
    if not rows:
        return None
    src, dst, sample_id = (np.array(column, dtype=np.int64) for column in zip(*rows))
    return Exchange(
        slots=len(rows), slot=np.arange(len(rows)), src=src, dst=dst, sample_id=sample_id,
        iteration=np.zeros(len(rows), dtype=np.int64),
    )


def take_from_peers(world: World, store: Store, work: StageWork, timeout_s: float) -> StageWork:
    """Collective: receive from other ranks' stores what `work` must copy; the rest is left to copy.

    What the ranks received is durable everywhere when this returns, so `execute` may then
    delete what this rank gave away.
    """
    wants = np.setdiff1d(work.to_copy, work.changed)  # a changed source: only shared storage has it
    offers = np.array(sorted(store.ids() - set(work.corrupt) - set(work.changed)), dtype=np.int64)
    gathered = world.comm.allgather((wants, offers, world.node_ranks[0]))
    moves = peer_moves([w for w, _, _ in gathered], [o for _, o, _ in gathered], [n for _, _, n in gathered])
    if moves is None:
        return work
    scheduler = Scheduler(world.comm, store, plan_key="", timeout_s=timeout_s)
    try:
        scheduler.repair(moves)
    finally:
        scheduler.close()
    received = moves.sample_id[moves.dst == world.rank].tolist()

    def current(sample_id: int) -> bool:  # the sender's copy was staged from today's source file
        meta, source = store.meta(sample_id), work.sources[sample_id]
        return (meta.nbytes, meta.source_mtime_ns) == (source.nbytes, source.mtime_ns)

    good = {i for i in received if current(i)}
    return replace(work, to_copy=[i for i in work.to_copy if i not in good], from_peers=len(good))


def execute(
    store: Store,
    work: StageWork,
    catalog: Catalog,
    threads: int = 8,
    on_bytes: Callable[[int], None] | None = None,
) -> StageReport:
    """Remove what the target does not list, then copy the rest in parallel; one flush at the end.

    Of a sharded dataset, a shard whose every sample is to be copied is read in one go and kept
    as one pack; the other samples are copied one by one.
    """
    started = time.perf_counter()
    for sample_id in work.to_remove:
        store.remove(sample_id)
    shards = whole_shards(catalog, work.to_copy)
    singles = sorted(set(work.to_copy).difference(*(catalog.shard_samples(shard) for shard in shards)))

    def copy_shard(shard: int) -> int:
        ids = catalog.shard_samples(shard)
        metas = [replace(catalog.meta(i), nbytes=work.sources[i].nbytes, source_mtime_ns=work.sources[i].mtime_ns)
                 for i in ids]
        try:
            data = catalog.read_shard(shard)
        except OSError as err:
            check_still_there(catalog, err)
            raise
        if len(data) != sum(meta.nbytes for meta in metas):
            raise DatasetError(
                f"{catalog.path(ids[0])} changed while being staged ({sum(meta.nbytes for meta in metas)} -> "
                f"{len(data)} bytes of samples); stage again once the dataset is stable"
            )
        store.add_pack(metas, data, checked=False)
        if on_bytes:
            on_bytes(len(data))
        return len(data)

    def copy(sample_id: int) -> int:
        source = work.sources[sample_id]
        meta = replace(catalog.meta(sample_id), source_mtime_ns=source.mtime_ns)
        try:
            stored = store.add(meta, catalog.read_chunks(sample_id), durable=False)
        except OSError as err:
            check_still_there(catalog, err)  # the file system went away, not just this file
            if not isinstance(err, (IsADirectoryError, PermissionError)):
                raise
            raise DatasetError(
                f"cannot read {catalog.path(sample_id)} ({err.strerror}); fix its permissions or "
                "remove it from the dataset"
            ) from None
        if stored.nbytes != source.nbytes:
            raise DatasetError(
                f"{catalog.path(sample_id)} changed size while being staged "
                f"({source.nbytes} -> {stored.nbytes} bytes); stage again once the dataset is stable"
            )
        if on_bytes:
            on_bytes(stored.nbytes)
        return stored.nbytes

    with ThreadPoolExecutor(threads, thread_name_prefix="stage") as pool:
        copied_bytes = sum(pool.map(copy_shard, shards)) + sum(pool.map(copy, singles))
    store.sync()
    return StageReport(
        copied=len(work.to_copy),
        copied_bytes=copied_bytes,
        removed=len(work.to_remove),
        changed=len(work.changed),
        corrupt=len(work.corrupt),
        adopted=work.adopted,
        seconds=time.perf_counter() - started,
        from_peers=work.from_peers,
    )


def whole_shards(catalog: Catalog, sample_ids: list[int]) -> list[int]:
    """The shards of a sharded catalog all of whose samples are among `sample_ids` (none of
    another catalog)."""
    if not isinstance(catalog, ShardedCatalog) or not sample_ids:
        return []
    wanted = set(sample_ids)
    shards = sorted({catalog.sample_shard[i] for i in wanted})
    return [shard for shard in shards if wanted.issuperset(catalog.shard_samples(shard))]


def byte_progress(total_bytes: int, enabled: bool, desc: str = "stage") -> tqdm:
    """A progress bar in bytes; disabled when `enabled` is false or there is nothing to copy."""
    return tqdm(total=total_bytes, desc=desc, unit="B", unit_scale=True, unit_divisor=1024,
                disable=not enabled or total_bytes == 0)


def require_staged(work: StageWork, store: Store) -> None:
    """With staging off, samples that no store holds are an error, not something to fix silently."""
    if work.to_copy:
        raise StoreError(
            f"{store.root} is not staged for this run: {len(work.to_copy)} samples missing or stale "
            f"(e.g. {work.to_copy[:3]}) and held by no other rank; run `hpcshuffle stage` with the "
            "run's dataset, workers and seed first, or set storage.stage=true"
        )


def stage_stores(
    world: World,
    stores: list[Store],
    targets: list[Iterable[int]],
    catalog: Catalog,
    *,
    headroom: float,
    threads: int = 8,
    max_bytes: int | None = None,
    copy: bool = True,
    progress: bool = False,
    timeout_s: float = 300.0,
) -> list[StageReport]:
    """Collective: bring each store to its target; rank 0 shows progress and prints a summary.

    Under MPI each process stages its own rank's store, and samples another rank's store holds
    come from there; a single process may stage several ranks of its node, from shared storage
    only. `headroom` is the extra fraction of a partition's bytes the store must have room for
    (an exchange's peak; 0 where nothing moves). With copy=False nothing is read from shared
    storage and a sample that no store holds is an error (for jobs that stage in a separate step).
    """
    if world.size > 1 and len(stores) != 1:
        raise ValueError(f"under MPI each process stages its own rank's store, got {len(stores)} stores")
    works, problem = [], None
    try:
        works = [assess(store, target, catalog, threads) for store, target in zip(stores, targets)]
    except (DatasetError, OSError) as err:
        problem = str(err)
    agree(world, problem)
    demands = world.comm.allgather([demand(world.hostname, s, w, headroom) for s, w in zip(stores, works)])
    check_capacity(stores[0].root.parent, [d for process in demands for d in process], headroom, max_bytes)
    if world.size > 1:  # peers are other MPI ranks; one process staging several ranks has none
        works = [take_from_peers(world, stores[0], works[0], timeout_s)]
    if not copy:
        problem = None
        try:
            for store, work in zip(stores, works):
                require_staged(work, store)
        except StoreError as err:
            problem = str(err)
        agree(world, problem)
    desc = "stage (rank 0)" if world.size > 1 else "stage"
    with byte_progress(sum(w.copy_bytes for w in works), progress and world.is_root, desc) as bar:
        reports = [execute(store, work, catalog, threads, on_bytes=bar.update) for store, work in zip(stores, works)]
    gathered = world.comm.gather(reports, root=0)
    changed = world.comm.gather([catalog.relpaths[i] for work in works for i in work.changed[:3]], root=0)
    if world.is_root:
        all_reports = [report for process in gathered for report in process]
        all_changed = [path for paths in changed for path in paths]
        print(summary(all_reports, all_changed, stores[0].root.parent), flush=True)
    return reports


def summary(reports: list[StageReport], changed_examples: list[str], local_dir: Path) -> str:
    """Rank 0's report of staging every rank: what was copied (the slowest rank's seconds and rate),
    removed, re-adopted and taken from peers, and the sources that changed or copies that were corrupt."""
    copied = sum(r.copied for r in reports)
    copied_bytes = sum(r.copied_bytes for r in reports)
    seconds = max(r.seconds for r in reports)
    rate = copied_bytes / seconds / 2**20 if seconds > 0 else 0.0
    lines = [
        f"staged {len(reports)} ranks into {local_dir}: copied {copied} samples ({gib(copied_bytes)}) "
        f"in {seconds:.3f} s ({rate:.1f} MiB/s), removed {sum(r.removed for r in reports)}, "
        f"re-adopted {sum(r.adopted for r in reports)}"
    ]
    from_peers = sum(r.from_peers for r in reports)
    if from_peers:
        lines[0] += f", took {from_peers} from other ranks' stores"
    changed = sum(r.changed for r in reports)
    if changed:
        lines.append(
            f"dataset changed since staging: {changed} source files differ in size or mtime from what "
            f"was staged (e.g. {changed_examples[:3]}); their copies were replaced"
        )
    corrupt = sum(r.corrupt for r in reports)
    if corrupt:
        lines.append(f"{corrupt} staged copies failed their checksum and were copied again")
    return "\n".join(lines)
