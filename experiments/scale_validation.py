"""`hpcshuffle scale` against runs measured on this machine and on its namespace cluster, each phase
side by side, in sample and out of sample (results/reference/scale/validation.txt):

1. `this_machine`, calibrated from four single-node runs made on 2026-11-25
   (results/reference/epoch_time_oos/calibration: GS, LS, PLS q 0.1 and 0.5 at M = 2, the loader in
   the loop) and the GlusterFS volume's per-file read times (results/reference/storage/latency.json,
   target gluster-1node: `scale calibrate --storage`), against them (in sample) and the runs of results/reference/epoch_time_oos made the
   same hour (out of sample: other loader settings — DataLoader processes, files in flight — M = 3
   and 4, and a repeat of the GS calibration run).
   Then the same platform against results/reference/epoch_time, the same workload run on
   2026-11-24, when this virtual machine ran it 1.6-2x faster (FW+BW alone 1.0 s against 1.7 s an
   epoch): a calibration describes the machine as it was when its runs were made.
2. `nscluster`, written from the namespace cluster's probes (experiments/cluster_scaling.py) and
   fitted to none of its runs, against results/reference/cluster/runs (1-3 nodes).
3. The same cluster with 5 ms added to every read on the storage node's brick, its shared storage
   taken from the per-file read times measured there (results/reference/storage/latency.json,
   target nscluster-lat5ms, as `scale calibrate --storage` reads them) and its bandwidth from the
   storage link then set (1 Gbit, at the share of its setting nscluster's probe reached). Against
   results/reference/cluster/oos/runs (GS and LS on 2 and 3 nodes, 4 files in flight).
4. Probe → predict (experiments/scale_probe_predict.py, its stored predictions and runs: nothing is
   simulated here): one node of the cluster probed, each 2- and 3-node cell of GS, LS and PLS
   predicted as a median with two 10-90 % intervals before any run, then measured several times;
   each round (2026-11-27 at the top of results/reference/scale/probe, later ones in dated folders).

    python experiments/scale_validation.py [--out results/reference/scale/validation.txt] [--jobs 2]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from hpcshuffle.scale.calibrate import measured_storage, read_runs
from hpcshuffle.scale.platform_yaml import load_platform, with_values
from hpcshuffle.scale.validate import validate, validation_table
from hpcshuffle.studies.cluster_platform import rate_bytes_per_s
from hpcshuffle.studies.probe_predict import comparison_text
from hpcshuffle.studies.runs import REPO

LATENCY = REPO / "results/reference/storage/latency.json"
LATENCY_TARGET = "nscluster-lat5ms"
PROBE = REPO / "results/reference/scale/probe"


def runs_under(*patterns: str) -> list[str]:
    return sorted(str(path) for pattern in patterns for path in REPO.glob(pattern) if (path / "metrics.jsonl").is_file())


def lat5_storage(cluster) -> dict:
    """The cluster's shared storage as measured with 5 ms per brick read (calibrate.measured_storage), and
    its bandwidth: the storage link then set, at the share of its setting that nscluster's probe reached."""
    storage = {f"shared.{key}": value for key, value in measured_storage(LATENCY, LATENCY_TARGET).items()}
    settings = json.loads(LATENCY.read_text())["targets"][LATENCY_TARGET]["settings"]
    probed = cluster.extra["calibration"]["settings"]["storage_link"]
    efficiency = cluster.shared.read_bandwidth / rate_bytes_per_s(probed)
    storage["shared.read_bandwidth"] = rate_bytes_per_s(settings["storage_link"]) * efficiency
    return storage


def section(title: str, platform, runs: list[str], jobs: int) -> str:
    rows = validate(platform, read_runs(runs), lambda line: print(line, file=sys.stderr, flush=True), jobs)
    return f"== {title}\n" + validation_table(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=str(REPO / "results/reference/scale/validation.txt"))
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    machine = load_platform("this_machine")
    parts = [section("this_machine (calibrated from 4 runs at M = 2) against the runs made the same hour", machine,
                     runs_under("results/reference/epoch_time_oos/calibration/*", "results/reference/epoch_time_oos/M*"),
                     args.jobs),
             section("this_machine against the same workload run on 2026-11-24 (the machine was faster that day)",
                     machine, runs_under("results/reference/epoch_time/M*/*"), args.jobs)]
    cluster = load_platform("nscluster")
    parts.append(section("nscluster (the cluster's probes; no run fitted) against its runs, 1-3 nodes, storage link "
                         "200 Mbit", cluster, runs_under("results/reference/cluster/runs/*/*"), args.jobs))
    oos = runs_under("results/reference/cluster/oos/runs/*/*")
    if oos:
        storage = lat5_storage(cluster)
        settings = ", ".join(f"{key} {value}" for key, value in storage.items())
        parts.append(section(f"nscluster with 5 ms per brick read, shared storage from {LATENCY.relative_to(REPO)} "
                             f"({settings}) against runs it never saw", with_values(cluster, storage), oos, args.jobs))
    # round 1 (2026-11-27) at the top of PROBE, each later round in a dated folder of its own
    rounds = [PROBE, *sorted(path for path in PROBE.iterdir() if path.is_dir())]
    for number, where in enumerate((path for path in rounds if (path / "measured.json").is_file()), start=1):
        parts.append(f"== probe -> predict, round {number}: one node probed, 2 and 3 nodes predicted with an interval "
                     "and measured several times (experiments/scale_probe_predict.py)\n"
                     + comparison_text(str(where.relative_to(REPO)), json.loads((where / "predicted.json").read_text()),
                                       json.loads((where / "measured.json").read_text())).rstrip("\n"))
    text = "\n\n".join(parts) + "\n"
    Path(args.out).write_text(f"# python experiments/scale_validation.py   (see its docstring)\n{text}")
    print(text)


if __name__ == "__main__":
    main()
