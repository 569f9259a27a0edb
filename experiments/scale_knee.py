"""The knee, swept (issue 46): PLS-0.1/LS and PLS-1.0/LS under both exchange schedulers at 512, 1,024 and
2,048 workers over a grid of per-rank noise (Pareto α 1.5 and 2.5, lognormal cv 1 and 4, each at mean
0.03, 0.1 and 0.3 ms), on the fast path of hpcshuffle/scale/knee.py, checked against SimGrid first.
Which settings give both the paper's knee and PLS-1.0/LS <= 1.37 at 512 workers? The logic is
hpcshuffle/studies/scale_knee.py; the few SimGrid runs of the check are cached under <out>/cache/.

    python experiments/scale_knee.py [--out results/reference/scale] [--seeds 100] [--jobs 1]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from hpcshuffle.studies.scale_knee import (
    agreement_table,
    default_platform,
    frontier,
    readme_with,
    sweep,
    sweep_table,
)


def main(argv: list[str] | None = None) -> int:
    """Write <out>/knee.txt (the agreement with SimGrid, the swept grid and its conclusion) and its key lines
    into <out>/README.md's knee.txt block."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("results/reference/scale"))
    parser.add_argument("--seeds", type=int, default=100, help="seeded draws per cell (>= 20)")
    parser.add_argument("--jobs", type=int, default=1, help="SimGrid runs at a time for the check")
    args = parser.parse_args(argv)
    platform = default_platform()
    command = "python experiments/scale_knee.py " + " ".join(sys.argv[1:] if argv is None else argv)
    lines = [command.strip(), ""]
    lines += agreement_table(platform, args.out / "scale_study.json", args.out, args.jobs, args.seeds)
    swept = sweep_table(sweep(platform, args.seeds), platform, args.seeds) + [""] + frontier(platform, args.seeds)
    lines += [""] + swept
    text = "\n".join(lines) + "\n"
    print(text)
    (args.out / "knee.txt").write_text(text)
    readme = args.out / "README.md"
    if readme.exists():
        readme.write_text(readme_with(readme.read_text(), swept))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
