"""Three paper figures at the papers' scale, from SimGrid simulations (`hpcshuffle scale`), each
with the paper's stated values beside the simulated ones, and two tables of the model's mechanisms
(hpcshuffle/studies/scale_fit.py: `fit`, the order-statistics path that experiments/scale_fit.py fits
abci's storage on, checked seed by seed against SimGrid at the fit's size; `knee`, PLS-0.1/LS by exchange scheduler, noise and network latency):

- Nguyen et al. Fig. 9: epoch time against workers (16-2,048) for global (GS), local (LS) and
  partial-0.1 (PLS) shuffling, ResNet-50 on ImageNet-1K, platform `abci` (b = 32 per rank: the
  paper's "40 and 20 iterations" per epoch at 1,024 and 2,048 workers). Log-log plot and the
  ratios GS/LS and PLS/LS per worker count, against the ratios the paper's text states.
- Nguyen et al. Fig. 10: the breakdown (I/O · exchange · FW+BW · allreduce) at 512 workers for
  LS, PLS q = 0.1 ... 1.0 and GS, ResNet-50 and DenseNet-161. An epoch there is 79 iterations; a
  PLS-1.0 iteration is 16,384 concurrent exchange messages, ~30 s of SimGrid on this machine, so
  `--fig10-iterations` (default 10) full iterations are simulated and their seconds scaled by
  N / samples to one epoch; the table checks the scaling against Fig. 9's whole epochs at 512.
- Yang & Cong Fig. 8: the per-epoch cost of collectively loading ImageNet-1K on 16-256 Lassen
  nodes (4 learners each), the regular loader (GS reading GPFS) against locality-aware loading.
  Yang measured loading only, so the platform gets a model `loading_only` with negligible FW+BW
  (1 ns per sample) and no gradient bytes, added here (conf/ is not changed):
  with_values(platform, {"models.loading_only": ...}). The local batch
  is b = 128 (`--yang-batch`): Yang's loading-only Fig. 1 and the training runs of Table I
  (8,192 / 64 learners) use 128; Sec. VI-A does not restate it.
  A second set charges decoding (`--yang-decode-ms`, default 2.1 ms per sample on one core, measured
  by benchmarks/loader.py here) over a learner's 11 cores: locality-aware loading still decodes.
- Optionally, a sensitivity curve for Fig. 9: GS with another per-file latency of the shared file
  system (`--gs-latency-ms`; `hpcshuffle scale --sensitivity` varies it beside every other knob).

Every simulation is cached as json under `<out>/cache/`, keyed by the platform file's sha256,
the changes made to it here, the scenario and the simulator's code (hpcshuffle/scale/engine.py,
scenario.py, platform.py, platform_yaml.py, traffic.py, storage.py, slots.py, hpcshuffle/plan/): a
rerun only simulates what is missing, and a platform whose yaml changed, or a changed engine, is
simulated again. Writes under
`--out`: `fit_check.txt`, `nguyen_fig9_epoch_time.png` and `nguyen_fig9.txt`, `nguyen_fig10_breakdown.png`
and `nguyen_fig10.txt`, `yang_fig8_loading.png` and `yang_fig8.txt`, `pls_knee.txt` and
`pls_knee.png`, and `scale_study.json` (every simulated row).

    python experiments/scale_study.py [--out results/reference/scale] [--jobs 2]
        [--figures fit fig9 fig10 yang8 knee] [--workers 16 32 ... 2048] [--densenet-q 0.1 0.3 0.5 1.0]
        [--no-densenet] [--yang-batch 128] [--gs-latency-ms 5] [--quick]

`--quick` checks the plumbing in a few minutes: a 1/20 ImageNet (64,058 samples), Fig. 9 at 16 and
32 workers, Fig. 10 at 64 workers with q = 0.1 and 1.0, Yang at 16 and 32 nodes; use another
`--out` for it. Each simulation is one process (SimGrid runs once per process); `--jobs` run at a
time (≤ 4 GiB each at 2,048 workers).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, fields
from datetime import datetime, timezone
from pathlib import Path

from hpcshuffle.scale.platform_yaml import load_platform, platform_path
from hpcshuffle.studies.scale_figures import fig9, fig10, yang8
from hpcshuffle.studies.scale_fit import fit_table, knee_table
from hpcshuffle.studies.scale_grid import (
    NGUYEN_WORKERS,
    PAPER,
    YANG_CORES_PER_LEARNER,
    YANG_NODES,
    GridOptions,
    build_jobs,
)
from hpcshuffle.studies.scale_jobs import CODE_SHA256, rows_of, run_jobs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="results/reference/scale")
    parser.add_argument("--jobs", type=int, default=2, help="simulations at a time (default 2)")
    parser.add_argument("--figures", nargs="+", choices=["fit", "fig9", "fig10", "yang8", "knee"],
                        default=["fit", "fig9", "fig10", "yang8", "knee"])
    parser.add_argument("--workers", type=int, nargs="+", default=None, metavar="M",
                        help=f"Fig. 9's worker counts (default {' '.join(map(str, NGUYEN_WORKERS))})")
    parser.add_argument("--nodes", type=int, nargs="+", default=None,
                        help=f"Yang Fig. 8's node counts (default {' '.join(map(str, YANG_NODES))})")
    parser.add_argument("--yang-batch", type=int, default=128, help="local batch of Yang's learners (default 128)")
    parser.add_argument("--yang-decode-ms", type=float, default=2.1,
                        help="also Yang's loading with this decode+augment cost per sample on one core, spread over "
                             f"a learner's {YANG_CORES_PER_LEARNER} cores (default 2.1, measured by benchmarks/loader.py "
                             "on this machine; 0: not run)")
    parser.add_argument("--gs-latency-ms", type=float, default=0.0,
                        help="also GS with this shared-FS per-file latency in Fig. 9 (default 0: not run; "
                             "`hpcshuffle scale --sensitivity` varies it with every other knob)")
    parser.add_argument("--gs-latency-workers", type=int, nargs="+", default=[128, 512, 2048], metavar="M",
                        help="the worker counts of that curve (default 128 512 2048)")
    parser.add_argument("--no-densenet", action="store_true", help="Fig. 10 for ResNet-50 only")
    parser.add_argument("--fig10-iterations", type=int, default=10,
                        help="Fig. 10 simulates this many full iterations at 512 workers and scales them to the "
                             "epoch (default 10 of its 79; 0: whole epochs, over an hour here)")
    parser.add_argument("--densenet-q", type=float, nargs="+", default=[0.1, 0.3, 0.5, 1.0],
                        help="Fig. 10's q for DenseNet-161 (default 0.1 0.3 0.5 1.0: fewer than ResNet-50's "
                             "to keep the study near 25 minutes on 2 cores)")
    parser.add_argument("--nguyen-platform", default="abci")
    parser.add_argument("--yang-platform", default="lassen")
    parser.add_argument("--quick", action="store_true", help="a small smoke run of every figure (see above)")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    started = time.perf_counter()
    jobs = build_jobs(GridOptions(**{option.name: getattr(args, option.name) for option in fields(GridOptions)}))
    results = run_jobs(jobs, out, args.jobs)
    wall = time.perf_counter() - started

    tables = {}
    writers = {"fig9": (fig9, "nguyen_fig9.txt"),
               "fig10": (lambda rows, out: fig10(rows, out, rows_of(jobs, results, "fig9")), "nguyen_fig10.txt"),
               "yang8": (yang8, "yang_fig8.txt"),
               "fit": (lambda rows, out: fit_table(rows, load_platform(args.nguyen_platform)), "fit_check.txt"),
               "knee": (knee_table, "pls_knee.txt")}
    for name in args.figures:
        make, filename = writers[name]
        tables[name] = make(rows_of(jobs, results, name), out)
        (out / filename).write_text(tables[name] + "\n")
        print(tables[name] + "\n", flush=True)

    simulated_wall = sum(r.wall_s for r, _, cached in results.values() if not cached)
    rows = []
    for index, job in enumerate(jobs):
        result, digest, cached = results[index]
        rows.append({"figure": job.figure, "label": job.label, "setup": job.setup.name,
                     "scale_to_epoch": job.scale,
                     "platform_file": str(platform_path(job.setup.platform)), "platform_sha256": digest,
                     "changes": job.setup.changes(), "scenario": asdict(job.scenario), "result": asdict(result),
                     "from_cache": cached})
    summary = {
        "command": "python experiments/scale_study.py " + " ".join(sys.argv[1:]),
        "made": f"{datetime.now(timezone.utc):%Y-%m-%dT%H:%M:%SZ}",
        "code_sha256": CODE_SHA256,
        "wall_s": wall,
        "simulated_now_wall_s": simulated_wall,
        "all_simulations_wall_s": sum(r.wall_s for r, _, _ in results.values()),
        "paper": PAPER,
        "rows": rows,
    }
    (out / "scale_study.json").write_text(json.dumps(summary, indent=1, default=str) + "\n")
    print(f"{len(jobs)} rows ({sum(1 for *_, c in results.values() if c)} cached) in {wall:.0f} s wall; "
          f"wrote figures, tables and scale_study.json under {out}")


if __name__ == "__main__":
    main()
