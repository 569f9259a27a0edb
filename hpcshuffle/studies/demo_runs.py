"""The demo's ratios over repeated runs: `make demo`'s three runs (GS, LS and PLS q=0.3 on 4 ranks,
4 epochs) repeated, kept under results/reference/demo/run<k>/ (metrics and config; the checkpoints
are dropped), and the README's demo block written from them.

    python -m hpcshuffle.studies.demo_runs [--repeats 3] [--out results/reference/demo]
    python -m hpcshuffle.studies.demo_runs --readme-only

trains the repeats that are missing (scripts/demo.sh, GlusterFS started for it as root), writes
<out>/ratios.json (per repeat: each strategy's steady epoch and io, GS/LS and PLS/LS; over the
repeats: min, median and max) and rewrites the README's block. tests/unit/test_docs.py makes the
block again from ratios.json and fails where the README differs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

from hpcshuffle.analysis.intervals import spread
from hpcshuffle.analysis.report import breakdown_table, run_summary
from hpcshuffle.studies.readme_blocks import rewrite_block
from hpcshuffle.studies.runs import REPO, launch_environment, records

BEGIN = "<!-- demo: made by `python -m hpcshuffle.studies.demo_runs` from results/reference/demo; do not edit -->"
END = "<!-- demo: end -->"
OUT = REPO / "results/reference/demo"
STRATEGIES = ("global", "local", "partial")  # scripts/demo.sh's run directories
RANKS, EPOCHS = 4, 4  # the Makefile's RANKS and EPOCHS


def complete(repeat: Path) -> bool:
    """Every strategy of the repeat has all its epochs."""
    return all(len(records(repeat / name)) >= EPOCHS for name in STRATEGIES)


def train(repeat: Path) -> None:
    """One `make demo` into `repeat`, then only what the ratios need is kept."""
    shutil.rmtree(repeat, ignore_errors=True)
    subprocess.run(["bash", "scripts/demo.sh", str(RANKS), str(EPOCHS), str(repeat)], cwd=REPO,
                   env=launch_environment(), check=True)
    for name in STRATEGIES:
        (repeat / name / "checkpoint.pt").unlink(missing_ok=True)
        shutil.rmtree(repeat / name / ".roll_call", ignore_errors=True)


def repeat_row(repeat: Path) -> dict:
    """A repeat's steady epoch and io per strategy (the report's means: epochs after the first) and
    its ratios to LS."""
    means = {name: run_summary(repeat / name, skip_first=True) for name in STRATEGIES}
    first = records(repeat / "local")[0]
    return {
        "run": repeat.name,
        "shared": first["shared"]["fs"] if first.get("shared") else "local disk",
        "epoch": {name: round(m["epoch"], 3) for name, m in means.items()},
        "io": {name: round(m["io"], 3) for name, m in means.items()},
        "gs_ls": round(means["global"]["epoch"] / means["local"]["epoch"], 3),
        "pls_ls": round(means["partial"]["epoch"] / means["local"]["epoch"], 3),
    }


def ratios(out: Path) -> dict:
    """ratios.json's content from the complete repeats under `out`."""
    rows = [repeat_row(r) for r in sorted(out.glob("run*")) if complete(r)]
    if not rows:
        raise FileNotFoundError(f"{out} holds no complete demo repeat: run python -m hpcshuffle.studies.demo_runs")
    return {"ranks": RANKS, "epochs": EPOCHS, "cores": os.cpu_count(), "runs": rows,
            "gs_ls": spread([r["gs_ls"] for r in rows]), "pls_ls": spread([r["pls_ls"] for r in rows])}


def block(found: dict, out: Path = OUT) -> str:
    """The README's demo block: the median repeat's table (by GS/LS) and the ranges over repeats."""
    rows = sorted(found["runs"], key=lambda r: r["gs_ls"])
    middle = rows[(len(rows) - 1) // 2]["run"]
    table = breakdown_table([out / middle / name for name in STRATEGIES]).splitlines()[1:]
    gs, pls = found["gs_ls"], found["pls_ls"]
    shared = sorted({r["shared"] for r in found["runs"]})
    return "\n".join([
        "```",
        f"== breakdown (make demo): results/reference/demo/{middle}, the median of {len(rows)} repeats ==",
        *table,
        "```",
        "",
        f"Over {gs['n']} repeats of `make demo` on a {found['cores']}-core machine (shared storage: {', '.join(shared)}), "
        f"GS took {gs['min']:.2f}–{gs['max']:.2f}× LS's epoch (median {gs['median']:.2f}) and PLS q=0.3 "
        f"{pls['min']:.2f}–{pls['max']:.2f}× (median {pls['median']:.2f}).",
    ])


def main() -> None:
    """Train the missing repeats (unless --readme-only), write ratios.json, rewrite the README's block."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--readme-only", action="store_true", help="train nothing: rewrite the README's block")
    args = parser.parse_args()
    if not args.readme_only:
        for k in range(args.repeats):
            repeat = args.out / f"run{k}"
            if complete(repeat):
                print(f"[{k + 1}/{args.repeats}] {repeat}: complete, reused", flush=True)
                continue
            print(f"[{k + 1}/{args.repeats}] {repeat}: make demo ({time.strftime('%H:%M:%S')})", flush=True)
            train(repeat)
        found = ratios(args.out)
        (args.out / "ratios.json").write_text(json.dumps(found, indent=1) + "\n")
    found = json.loads((args.out / "ratios.json").read_text())
    readme = REPO / "README.md"
    changed = rewrite_block(readme, BEGIN, END, block(found, args.out))
    print(f"{readme}: {'rewritten' if changed else 'already current'}")


if __name__ == "__main__":
    os.chdir(REPO)
    main()
