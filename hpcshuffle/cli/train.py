"""`hpcshuffle train` and `hpcshuffle simulate`: the training run, its Hydra overrides passed through."""

from __future__ import annotations

import argparse
import sys

PASS_THROUGH = ("train", "simulate")


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Listed in `hpcshuffle --help` only: `main` hands these commands to Hydra before parsing."""
    commands.add_parser("train", help="train: `hpcshuffle train <hydra overrides>` (see conf/)")
    commands.add_parser("simulate", help="train M virtual workers in one process: `hpcshuffle simulate M "
                                         "<hydra overrides>` (= train shuffle.virtual_workers=M)")


def simulate_argv(argv: list[str]) -> list[str]:
    """`simulate M overrides...` as the training run's arguments: M virtual workers in one process."""
    workers = argv[0] if argv else ""
    if not workers.isdigit() or int(workers) < 1:
        raise ValueError(
            f"`hpcshuffle simulate M [hydra overrides]`: M, the number of virtual workers, must be a positive "
            f"integer, got {workers!r}; e.g. `hpcshuffle simulate 64 shuffle=partial shuffle.q=0.1`"
        )
    return [f"shuffle.virtual_workers={int(workers)}", *argv[1:]]


def pass_through(command: str, argv: list[str]) -> None:
    """Run `hpcshuffle.train.main()` as if started as `hpcshuffle <command> <argv>`."""
    from hpcshuffle import train

    overrides = argv
    if command == "simulate" and argv[:1] not in (["-h"], ["--help"]):
        try:
            overrides = simulate_argv(argv)
        except ValueError as err:
            print(f"hpcshuffle simulate: error: {err}", file=sys.stderr)
            sys.exit(2)
    sys.argv = [f"hpcshuffle {command}", *overrides]
    train.main()
