"""The `hpcshuffle` command: plan, synth, pack, stage, train, simulate, report, tune-q, imbalance, model, scale."""

from __future__ import annotations

import argparse
import sys

from hpcshuffle.cli import (
    imbalance,
    model,
    pack,
    plan,
    report,
    scale,
    stage,
    synth,
    train,
    tune_q,
)
from hpcshuffle.cli.train import simulate_argv
from hpcshuffle.storage.store import StoreError

# in the order `hpcshuffle --help` lists them; each adds its sub-parsers with `run` set to its function
COMMANDS = (plan, synth, pack, stage, train, report, tune_q, imbalance, model, scale)


def build_parser() -> argparse.ArgumentParser:
    """The `hpcshuffle` parser with every command of COMMANDS, each setting `run` to its function."""
    parser = argparse.ArgumentParser(prog="hpcshuffle", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.add_parser(commands)
    return parser


def main(argv: list[str] | None = None) -> None:
    """Run `hpcshuffle ARGV...`: train and simulate hand their arguments to Hydra; the other commands
    exit with status 2 and the message on bad input (ValueError, FileNotFoundError, StoreError)."""
    argv = sys.argv[1:] if argv is None else argv
    # train and simulate hand their arguments to Hydra untouched
    if argv[:1] and argv[0] in train.PASS_THROUGH:
        train.pass_through(argv[0], argv[1:])
        return
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        args.run(args)
    except (ValueError, FileNotFoundError, StoreError) as err:
        parser.exit(2, f"hpcshuffle {args.command}: error: {err}\n")


__all__ = ["main", "simulate_argv"]
