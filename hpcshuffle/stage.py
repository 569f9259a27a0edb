"""Bring a rank's store to what the plan says it holds: adopt, delete, copy the difference.

The store is a cache of the plan, so first staging, restaging for another worker count and
repair after a crash are the same operation.
"""

from __future__ import annotations

from dataclasses import dataclass

from tqdm import tqdm

from hpcshuffle.formats.imagefolder import Catalog
from hpcshuffle.store import Store


@dataclass(frozen=True)
class StageReport:
    copied: int
    removed: int
    adopted: int
    copied_bytes: int


def reconcile(store: Store, target_ids, catalog: Catalog, progress: bool = False) -> StageReport:
    """Make `store` hold exactly `target_ids`, copying what is missing from `catalog.root`.

    Uncommitted files the target wants (received just before a crash) are adopted, not copied
    again; everything else the target does not list is removed.
    """
    target = {int(i) for i in target_ids}
    adopted = 0
    for sample_id in sorted(target & set(store.orphans)):
        store.adopt(catalog.meta(sample_id))
        adopted += 1
    store.discard_orphans()
    diff = store.verify(target)
    for sample_id in diff.extra:
        store.remove(sample_id)
    copied_bytes = 0
    for sample_id in tqdm(diff.missing, desc="stage", unit="sample", disable=not progress or not diff.missing):
        data = catalog.path(sample_id).read_bytes()
        store.add(catalog.meta(sample_id), data, durable=False)
        copied_bytes += len(data)
    store.sync()
    return StageReport(len(diff.missing), len(diff.extra), adopted, copied_bytes)
