"""Probe → predict → measure on the namespace cluster of scripts/cluster.sh: probe ONE node, predict
the 2- and 3-node epochs of GS, LS and PLS (q 0.1, 0.3) with a 10-90 % interval, then measure each
cell several times (hpcshuffle/studies/probe_predict.py says how each step works).

    bash scripts/cluster.sh up --nodes 3 --storage-link 200mbit
    python experiments/scale_probe_predict.py predict --out DIR [--probes 10] [--nodes 2 3]   # the predictions
    git add DIR && git commit ...                                                   # before any run
    python experiments/scale_probe_predict.py measure --out DIR [--repeats 5]       # ~40 min at 5 repeats
    python experiments/scale_probe_predict.py compare --out DIR                     # the tables
    python experiments/scale_probe_predict.py resimulate --out DIR    # a measured round, again with today's model
    bash scripts/cluster.sh down

Writes under --out (default results/reference/scale/probe): `probes.json` (the cluster's settings and
every probe repeat's measurements), `platform.yaml` (the first repeat's platform at the largest node
count, as a user would pass it to `hpcshuffle scale --platform`), `predicted.json` and `predicted.txt`
(per cell the simulated epoch at every repeat and two intervals, median [p10, p90]: over the repeats,
and with the model's errors in an earlier comparison, --past, out of sample only where that was a
round predicted before its runs). `measure` writes
`measured.json` and the runs under `runs/N<nodes>x1/<strategy>/r<repeat>/` (complete runs are
reused); `compare` writes `compare.json` (the model and the back-of-envelope scored on the same cells:
median absolute error, coverage of the 80 % interval, interval score) and `compare.txt`, which experiments/scale_validation.py puts into
results/reference/scale/validation.txt. The predictions use the probes (and --past's errors) only:
no run they are compared with is fitted. Run `measure` while nothing else runs: the nodes share the
machine's cores.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from hpcshuffle.studies.cluster import connect, snapshot
from hpcshuffle.studies.cluster_runs import STRATEGIES, ensure_dataset
from hpcshuffle.studies.probe_predict import (
    FORECASTS,
    POOLED,
    cell_epochs,
    comparison_text,
    envelope_cells,
    measure_all,
    model_errors,
    placements,
    predict,
    prediction_text,
    probe_once,
    repeat_text,
    round_errors,
    scores,
    scores_text,
)
from hpcshuffle.studies.runs import REPO

SAMPLES = 3000  # experiments/cluster_scaling.py's dataset: 3,000 ~107 KB JPEGs


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("step", choices=["predict", "measure", "compare", "resimulate"])
    parser.add_argument("--out", type=Path, default=REPO / "results/reference/scale/probe")
    parser.add_argument("--nodes", type=int, nargs="+", default=[2, 3], metavar="K", help="node counts to predict")
    parser.add_argument("--probes", type=int, default=10, help="repeats of the one-node probe (predict)")
    parser.add_argument("--files", type=int, default=150, help="dataset files each probe repeat reads (predict)")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each cell (measure)")
    parser.add_argument("--epochs", type=int, default=3, help="epochs of each run, the first not timed (measure)")
    parser.add_argument("--past", type=Path, default=REPO / "results/reference/scale/probe",
                        help="an earlier probe round (its predicted.json, committed before its measured.json), or "
                             "an earlier comparison (scaling.json and predicted.json), whose errors widen the second "
                             "interval (predict). Only a round predicted before it ran gives errors out of sample")
    args = parser.parse_args()
    args.out = args.out if args.out.is_absolute() else REPO / args.out  # jobs see the path from their own nodes
    if args.step == "predict" and args.past.resolve() == args.out.resolve():
        parser.error(f"--past {args.past} is --out: a new round goes into a directory of its own "
                     "(e.g. --out results/reference/scale/probe/<date>) and takes an earlier round's errors")
    if args.probes < 2 or args.repeats < 1 or args.epochs < 2 or min(args.nodes) < 2:
        parser.error("--probes must be >= 2 (an interval needs several), --repeats >= 1, --epochs >= 2 (the first is "
                     "not timed), --nodes >= 2 (one node is what the probe measures)")
    return args


def step_predict(args: argparse.Namespace, cluster, dataset: Path) -> None:
    readers = tuple(range(1, max(args.nodes) + 1))
    probes = []
    for repeat in range(args.probes):
        started = time.perf_counter()
        probes.append(probe_once(cluster, dataset, args.files, 10, readers))
        node = probes[-1]["node"]
        rates = ", ".join(f"{p['readers']}: {p['read_Bps'] / 1e6:.1f}" for p in node["concurrent"])
        print(f"probe {repeat + 1}/{args.probes} in {time.perf_counter() - started:.0f} s: shared file "
              f"{node['shared_file_s'] * 1e3:.2f} ms, loaded {node['loaded_per_file_s'] * 1e3:.2f} ms/file, FW+BW "
              f"{node['fwbw_per_sample_s'] * 1e3:.3f} ms/sample, MB/s by readers {rates}", flush=True)
    document = {"cluster": cluster.settings, "dataset": [dataset.name, SAMPLES], "nodes": args.nodes,
                "written": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "probes": probes}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "probes.json").write_text(json.dumps(document, indent=1) + "\n")
    (args.out / "platform.yaml").write_text(repeat_text(cluster.settings, probes[0], (dataset.name, SAMPLES),
                                                        max(args.nodes)))
    out_of_sample = (args.past / "measured.json").exists()  # an earlier probe round, predicted before its runs
    if out_of_sample:
        errors = round_errors(json.loads((args.past / "predicted.json").read_text()),
                              json.loads((args.past / "measured.json").read_text()))
        how = "measured.json over predicted.json's medians (committed before those runs)"
    else:
        errors = model_errors(json.loads((args.past / "scaling.json").read_text())["runs"],
                              json.loads((args.past / "predicted.json").read_text())["runs"])
        how = "scaling.json over predicted.json"
    cells = predict(cluster.settings, probes, (dataset.name, SAMPLES), args.nodes, STRATEGIES,
                    lambda line: print(line, file=sys.stderr, flush=True), errors=errors)
    past = f"{args.past.relative_to(REPO)}: {how}, {len(errors)} runs"
    (args.out / "predicted.json").write_text(json.dumps({"written": document["written"], "model_errors": errors,
                                                         "model_errors_from": past,
                                                         "model_errors_out_of_sample": out_of_sample,
                                                         "cells": cells}, indent=1) + "\n")
    (args.out / "predicted.txt").write_text(prediction_text(document["written"], past, cells))
    print(f"wrote {args.out / 'probes.json'} and {args.out / 'predicted.json'}: commit them before `measure`")


def step_resimulate(args: argparse.Namespace) -> None:
    """A measured round's committed probes simulated again with today's engine, beside its committed
    predictions and its measured medians: how a change to the model moves those cells. A retrospective,
    never a prediction (the runs were seen first); written to resimulated.txt."""
    probed = json.loads((args.out / "probes.json").read_text())
    committed = {(c["nodes"], c["run"]): c["epoch_s"]["median"]
                 for c in json.loads((args.out / "predicted.json").read_text())["cells"]}
    runs = json.loads((args.out / "measured.json").read_text())["runs"]
    cells = predict(probed["cluster"], probed["probes"], tuple(probed["dataset"]), probed["nodes"], STRATEGIES,
                    lambda line: print(line, file=sys.stderr, flush=True))
    lines = [f"{args.out.relative_to(REPO)}'s probes ({probed['written']}) simulated again on "
             f"{time.strftime('%Y-%m-%d', time.gmtime())} with the engine of that day: a retrospective, not a "
             "prediction; seconds per epoch, median over the probe repeats (error: over the measured median)",
             f"{'nodes':>5} {'run':<12} {'measured':>9} {'committed':>16} {'today [p10, p90]':>30}"]
    for cell in cells:
        measured = statistics.median(cell_epochs(runs, cell["nodes"], cell["run"]))
        then, now = committed[(cell["nodes"], cell["run"])], cell["epoch_s"]
        lines.append(f"{cell['nodes']:>5} {cell['run']:<12} {measured:>9.2f} {then:>9.2f} ({then / measured - 1:+4.0%}) "
                     f"{now['median']:>9.2f} [{now['p10']:6.2f}, {now['p90']:6.2f}] ({now['median'] / measured - 1:+4.0%})")
    text = "\n".join(lines) + "\n"
    (args.out / "resimulated.txt").write_text(text)
    print(text, end="")


def main() -> None:
    args = parse_args()
    if args.step == "resimulate":
        step_resimulate(args)
        return
    if args.step == "compare":
        predicted = json.loads((args.out / "predicted.json").read_text())
        measured = json.loads((args.out / "measured.json").read_text())
        envelope_from = "predicted.json, committed with the model's predictions"
        if any("envelope" not in cell for cell in predicted["cells"]):  # a round predicted before the envelope
            probed = json.loads((args.out / "probes.json").read_text())
            envelopes = envelope_cells(placements(probed["cluster"], probed["probes"], tuple(probed["dataset"]),
                                                  probed["nodes"], STRATEGIES))
            for cell in predicted["cells"]:
                cell["envelope"] = envelopes[(cell["nodes"], cell["run"])]
            envelope_from = (f"computed {time.strftime('%Y-%m-%d', time.gmtime())} from probes.json, after the runs "
                             "(the round predates the envelope; it has no knob a run could have set)")
        forecasts = {**FORECASTS, **(POOLED if predicted.get("model_errors_out_of_sample") else {})}
        found = scores(predicted["cells"], measured["runs"], forecasts)
        document = {"predicted": predicted["written"], "measured": measured["written"], "envelope_from": envelope_from,
                    **found}
        (args.out / "compare.json").write_text(json.dumps(document, indent=1) + "\n")
        text = comparison_text(str(args.out.relative_to(REPO)), predicted, measured) + "\n" + scores_text(found) + \
            f"\nthe envelope: {envelope_from}\n"
        (args.out / "compare.txt").write_text(text)
        print(text, end="")
        return
    with tempfile.TemporaryDirectory(prefix="probe-predict-") as workdir:
        cluster = connect(snapshot(Path(workdir)), max(args.nodes))
        dataset = ensure_dataset(cluster, SAMPLES)
        if args.step == "predict":
            step_predict(args, cluster, dataset)
            return
        probed = json.loads((args.out / "probes.json").read_text())
        if probed["cluster"] != cluster.settings:
            sys.exit(f"the cluster is up with {cluster.settings}, the predictions were made on {probed['cluster']}: "
                     "bring it up with those settings (bash scripts/cluster.sh down; up ...)")
        started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        rows = measure_all(cluster, args.out, dataset, args.nodes, STRATEGIES, args.repeats, args.epochs)
    (args.out / "measured.json").write_text(json.dumps({"written": started, "cluster": cluster.settings,
                                                        "runs": rows}, indent=1) + "\n")
    problems = [problem for row in rows for problem in row["audit_problems"]]
    if problems:
        sys.exit("samples lost or duplicated:\n" + "\n".join(problems))


if __name__ == "__main__":
    main()
