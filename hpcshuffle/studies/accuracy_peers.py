"""The peers' shuffles in the accuracy study (experiments/accuracy_study.py --preregister-peers): what the
plans alone say of every strategy of a cell before the peers' runs are trained, to commit first.

For each (partition, M) and strategy, from seed 0's plan: the label skew at the last epoch
(analysis/labels.py: least first is the predicted best accuracy, as the first pre-registration reads it),
Streaming's shuffle-quality score of the last epoch (analysis/order_entropy.py, over shards of the peers'
`shuffle.block` consecutive ids for every strategy: highest first is the predicted best), and the samples
each epoch reads from shared storage (Streaming's: as a node keeping every shard it downloaded,
plan/streaming.py's `shard_cache_reads`; the others': the plan's `reads_shared`, staging not counted).
The peers' strategies read the dataset's file order in blocks, so like global shuffling they have no
partition: trained once per M, they stand for every partition's cell.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from hpcshuffle.analysis.intervals import spearman
from hpcshuffle.analysis.labels import plans_quality
from hpcshuffle.analysis.order_entropy import entropy_quality
from hpcshuffle.plan import PlanSpec, get_strategy, plan_epochs
from hpcshuffle.plan.streaming import shard_cache_reads
from hpcshuffle.studies.accuracy_runs import (
    cell_dir,
    composed,
    has_partition,
    strategy_of,
    training_labels,
    untrained_cells,
    write_registration,
)
from hpcshuffle.studies.runs import strategy_overrides


def score_shard(overrides: list[str]) -> int:
    """The shards the entropy score groups ids into, for every strategy alike: the peers' shuffle.block."""
    return composed([*overrides, "shuffle=corgipile"])["shuffle"]["block"]


def order_measures(overrides: list[str], partition: str, workers: int, epochs: int, strategy: str,
                   labels: np.ndarray, shard: int) -> dict:
    """Seed 0's plan of `strategy` in the cell: its last epoch's label skew and entropy score, and the
    samples it reads from shared storage each epoch."""
    config = composed([*overrides, *strategy_overrides(strategy), f"storage.partition={partition}",
                       f"shuffle.virtual_workers={workers}"])
    shuffle = config["shuffle"]
    blocks = get_strategy(shuffle["name"]).blocks
    spec = PlanSpec(len(labels), workers, config["batch_size"], shuffle["q"], 0, partition=partition,
                    shard_samples=shuffle["block"] if blocks else 1, shuffle_buffer=shuffle["buffer"] if blocks else 0,
                    labels=tuple(labels))
    plans = list(plan_epochs(spec, shuffle["name"], epochs))
    reads = (shard_cache_reads(plans).sum(axis=1) if get_strategy(shuffle["name"]).peers_venv
             else np.array([sum(plan.reads_shared) for plan in plans]))
    skew = plans_quality(spec, plans, labels)[-1]["mixing"]["labels"]["excess"]
    return {"skew": round(skew, 6), "entropy": round(entropy_quality(plans[-1].order, spec.batch_size, shard), 4),
            "shared_reads": reads.tolist()}


def plan_measures(overrides: list[str], partition: str, workers: int, epochs: int, strategies: list[str],
                  shard: int) -> dict[str, dict]:
    """`order_measures` of every strategy of one cell, by strategy."""
    config = composed([*overrides, f"storage.partition={partition}", f"shuffle.virtual_workers={workers}"])
    labels = np.asarray(training_labels(config["dataset"]))
    return {s: order_measures(overrides, partition, workers, epochs, s, labels, shard) for s in strategies}


def peer_preregistered(overrides: list[str], partition: str, workers: int, epochs: int, strategies: list[str],
                       shard: int) -> dict:
    """One cell's measures for every strategy and the two predicted orders of accuracy: by label skew (least
    first) and by the entropy score (highest first)."""
    measures = plan_measures(overrides, partition, workers, epochs, strategies, shard)
    batch_size = composed([*overrides, f"shuffle.virtual_workers={workers}"])["batch_size"]
    return {"partition": partition, "workers": workers, "batch_size": batch_size, "measures": measures,
            "order_by_skew": sorted(strategies, key=lambda s: measures[s]["skew"]),
            "order_by_entropy": sorted(strategies, key=lambda s: -measures[s]["entropy"])}


def write_peer_preregistration(path: Path, out: Path, dataset: str, partitions: list[str],
                               batches: dict[int, list[str]], strategies: list[str], peers: list[str], epochs: int,
                               seeds: int, overrides: list[str]) -> None:
    """`accuracy_study.py --preregister-peers`: `peer_preregistered` for every (partition, M) of the study
    under `out` in which none of `peers` (the strategies new to it) has runs yet, written to `path` with the
    commit and command that made them; a cell with runs of a peer is left out and named."""
    if not peers:
        raise ValueError(f"--preregister-peers needs a strategy without a partition besides global among "
                         f"--strategies ({', '.join(strategies)}), e.g. corgipile or streaming_py1e")
    shard = score_shard(overrides)
    cells, skipped = untrained_cells(
        partitions, batches,  # the peers train under the first partition for every partition's cell
        lambda partition, workers: any(cell_dir(out, partitions[0], workers, s).exists() for s in peers),
        lambda partition, workers, batch: peer_preregistered([*overrides, *batch], partition, workers, epochs,
                                                             strategies, shard),
        lambda cell: f"by skew {' > '.join(cell['order_by_skew'])}; by entropy {' > '.join(cell['order_by_entropy'])}")
    write_registration(path, {
        "dataset": dataset, "overrides": overrides, "epochs": epochs, "seeds": seeds, "peers": peers,
        "score_shard": shard,
        "rule": "per cell, seed 0's plans: order_by_skew ranks the strategies by their label skew at the last epoch, "
                "least first; order_by_entropy by Streaming's shuffle-quality score of the last epoch (ids and "
                f"shards of {shard} consecutive ids), highest first; each is read as the predicted order of final "
                "top-1 accuracy, best first, and scored by Spearman's rank correlation of the measure as stored "
                "(skew negated; ties only where equal) with the trained paired gaps to global shuffling, within each "
                "cell and within each partition. The peers read the dataset's file order (class by class) in blocks "
                "in both partitions, so their measures are the same in both; in the random cells global, local and "
                "partial differ by noise alone",
        "cells": cells, "skipped_as_trained": skipped})


def peers_of(strategies: list[str]) -> list[str]:
    """The study's strategies without a partition besides global (the peers': corgipile, streaming_*)."""
    return [s for s in strategies if not has_partition(s) and s != "global"]


def rho(pairs: list[tuple[float, float]]) -> dict:
    """Spearman's ρ of (measure, gap) pairs, None below 3 pairs or where either side is one value throughout."""
    defined = len(pairs) >= 3 and all(len(set(side)) > 1 for side in zip(*pairs))
    return {"points": len(pairs), "spearman_rho": round(spearman(*zip(*pairs)), 3) if defined else None}


def peer_preregistration_check(result: dict, preregistered: dict) -> dict:
    """The second pre-registration held against the trained study: per cell and within each partition,
    Spearman's ρ of each measure (label skew negated, the entropy score) against the paired gap to
    global shuffling (0 for global itself), over the strategies trained in the cell."""
    gaps = {(g["partition"], g["workers"], strategy_of(g)): g["gap_mean"] for g in result["gaps"]}
    cells, pooled = [], {}
    for cell in preregistered["cells"]:
        key = (cell["partition"], cell["workers"])
        trained = {s: 0.0 if s == "global" else gaps[(*key, s)] for s in cell["measures"]
                   if s == "global" or (*key, s) in gaps}
        if len(trained) < 2:
            continue
        measures = {"skew": {s: -cell["measures"][s]["skew"] for s in trained},
                    "entropy": {s: cell["measures"][s]["entropy"] for s in trained}}
        row = {"partition": key[0], "workers": key[1], "gaps": trained,
               "trained_order": sorted(trained, key=lambda s: -trained[s])}
        for name, values in measures.items():
            row[f"rho_{name}"] = rho([(values[s], trained[s]) for s in trained])["spearman_rho"]
            pooled.setdefault(key[0], {}).setdefault(name, []).extend((values[s], trained[s]) for s in trained)
        cells.append(row)
    return {"score_shard": preregistered["score_shard"], "cells": cells,
            "by_partition": {partition: {name: rho(pairs) for name, pairs in found.items()}
                             for partition, found in pooled.items()}}


def peer_check_text(check: dict) -> str:
    """`peer_preregistration_check` as the study's text prints it: ρ of each measure per cell and per partition."""
    def value(found: float | None) -> str:
        return "undefined" if found is None else f"{found:+.2f}"

    lines = ["the second pre-registration: Spearman's rho of each measure (label skew negated, entropy score) "
             "against the paired gap to GS"]
    lines += [f"  {c['partition']} M={c['workers']}: skew {value(c['rho_skew'])}, entropy {value(c['rho_entropy'])} "
              f"(trained order {' > '.join(c['trained_order'])})" for c in check["cells"]]
    lines += [f"  within {partition}: skew {value(found['skew']['spearman_rho'])}, entropy "
              f"{value(found['entropy']['spearman_rho'])} ({found['skew']['points']} points)"
              for partition, found in check["by_partition"].items()]
    return "\n".join(lines)
