"""The README, docs/*.md and the READMEs of benchmarks/, experiments/, jobs/ and results/ stay true to
the tree: every relative link (and its anchor) resolves, every quoted `make <target>` is a Makefile
target, and every quoted `hpcshuffle ...` command parses.

Commands are read from fenced code blocks and inline code. An `hpcshuffle` command is parsed by the
real argument parser (`hpcshuffle.cli.build_parser`) without running it, prefixes of flags not
allowed, so a renamed or misspelt flag fails here. The docs' placeholders are understood: `[...]`
marks optional words, `a|b` alternatives (each is parsed), a lone `...` more values or an elided
one, and upper-case words (`N`, `RUN_DIR`) or shell variables stand for values. `train` and
`simulate` take Hydra overrides: for them only `hpcshuffle train --help` is run. Everything runs in
this process.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import itertools
import json
import re
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from hpcshuffle.cli import build_parser, main, simulate_argv
from hpcshuffle.studies import (
    accuracy_readme,
    demo_runs,
    dlio_peer,
    peers,
    readme_blocks,
)

REPO = Path(__file__).resolve().parents[2]
# the README, the docs, and the READMEs beside the scripts and results they describe
PAGES = [
    REPO / "README.md",
    *sorted((REPO / "docs").glob("*.md")),
    *sorted(page for folder in ("benchmarks", "experiments", "jobs", "results")
            for page in (REPO / folder).rglob("README.md")),
]

FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
INLINE = re.compile(r"`([^`]+)`")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$", re.MULTILINE)
MAKE = re.compile(r"(?<![\w$(-])make\s+([A-Za-z][\w.-]*)")
HPCSHUFFLE = re.compile(r"(?<![\w./-])hpcshuffle\s+(?=[a-z])")
SHELL_COMMENT = re.compile(r"(^|\s)#.*$")
SEPARATORS = {"|", "||", "&&", ";", "&", ">", ">>", "2>", "2>&1"}
PLACEHOLDER = re.compile(r"^([A-Z][A-Z0-9_]*(\.[a-z]+)?|\$.*|\.\.\.)$")  # N, RUN_DIR, PATH.png, $TMPDIR/x, ...
HYDRA_COMMANDS = ("train", "simulate")


def name(page: Path) -> str:
    """A page's path from the repository's root, as failures name it."""
    return str(page.relative_to(REPO))


def prose(page: Path) -> str:
    """The page's text outside code blocks and inline code."""
    return INLINE.sub("", FENCE.sub("", page.read_text()))


def code_lines(page: Path) -> list[str]:
    """One entry per line of the page's fenced code blocks: continuation lines joined, shell
    comments dropped. These are commands a reader copies whole."""
    lines = []
    for block in FENCE.findall(page.read_text()):
        lines += [SHELL_COMMENT.sub("", line) for line in block.replace("\\\n", " ").splitlines()]
    return lines


def inline_code(page: Path) -> list[str]:
    """The page's inline code spans, whitespace collapsed and table pipes (`\\|`) unescaped."""
    spans = INLINE.findall(FENCE.sub("", page.read_text()))
    return [" ".join(span.replace("\\|", "|").split()) for span in spans]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text, lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"`([^`]*)`", r"\1", heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text).replace("*", "")
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every heading anchor of a markdown page (outside code blocks), duplicates numbered as GitHub does."""
    seen: dict[str, int] = {}
    result = set()
    for _, heading in HEADING.findall(FENCE.sub("", page.read_text())):
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        result.add(base if count == 0 else f"{base}-{count}")
    return result


def make_targets() -> set[str]:
    """The targets the Makefile defines (`name:` at the start of a line, not `name :=`)."""
    lines = (REPO / "Makefile").read_text().splitlines()
    return {m.group(1) for line in lines if (m := re.match(r"^([A-Za-z][\w.-]*)\s*:(?!=)", line))}


def hpcshuffle_commands(code: str) -> Iterator[list[str]]:
    """The argument lists of the `hpcshuffle` commands quoted in one line of code, placeholders
    resolved: brackets of optional words dropped, `RUN_DIR...` as `RUN_DIR`, one list per `a|b`
    alternative. A lone `...` stays: a placeholder for more values, or for an elided one."""
    for match in HPCSHUFFLE.finditer(code):
        words = []
        for token in shlex.split(code[match.end():]):
            if token in SEPARATORS or token.startswith(")"):
                break
            word = token.strip("[]")
            word = word if word == "..." else word.removesuffix("...")
            if word:
                words.append(word)
        choices = [word.split("|") if "|" in word else [word] for word in words]
        yield from (list(combination) for combination in itertools.product(*choices))


class _AnyPlaceholder(list):
    """An argument's choices that also admit a placeholder such as `F`."""

    def __contains__(self, value: object) -> bool:
        return (isinstance(value, str) and PLACEHOLDER.match(value) is not None) or super().__contains__(value)


def _placeholder_type(convert):
    """An argument's type conversion that lets a placeholder such as `N` through unconverted."""

    def convert_or_keep(value: str):
        return value if PLACEHOLDER.match(value) else convert(value)

    convert_or_keep.__name__ = getattr(convert, "__name__", repr(convert))
    return convert_or_keep


def strict_parser() -> argparse.ArgumentParser:
    """`hpcshuffle`'s parser with no abbreviated flags, and with placeholders accepted as values."""
    parser = build_parser()
    pending = [parser]
    while pending:
        current = pending.pop()
        current.allow_abbrev = False
        for action in current._actions:
            if isinstance(action, argparse._SubParsersAction):
                pending.extend(set(action.choices.values()))
                continue
            if action.type is not None:
                action.type = _placeholder_type(action.type)
            if action.choices is not None:
                action.choices = _AnyPlaceholder(action.choices)
    return parser


def parse_error(parser: argparse.ArgumentParser, argv: list[str]) -> str | None:
    """None if argv parses (or `--help` exits 0), else what the parser said."""
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(stderr):
            parser.parse_args(argv)
    except SystemExit as err:
        return None if err.code == 0 else stderr.getvalue().strip().splitlines()[-1]
    return None


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """A parser's subcommands by name; {} if it has none."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def quoted_hpcshuffle_commands() -> list[tuple[str, bool, list[str]]]:
    """(page, whole, argv) per quoted command; whole: from a code block, not a fragment in prose."""
    return [(name(page), whole, argv) for page in PAGES
            for whole, codes in ((True, code_lines(page)), (False, inline_code(page)))
            for code in codes for argv in hpcshuffle_commands(code)]


def nested_commands(parser: argparse.ArgumentParser, command: str) -> dict[str, argparse.ArgumentParser]:
    """The sub-subcommands of `hpcshuffle <command>` (`scale calibrate`, `synth digits`); {} if none."""
    sub = subcommands(parser).get(command)
    return subcommands(sub) if sub is not None else {}


def test_pages_are_found():
    """The README and the docs pages are where this test looks."""
    assert (REPO / "README.md") in PAGES and len(PAGES) >= 9, PAGES


@pytest.mark.parametrize("page", PAGES, ids=name)
def test_every_relative_link_resolves(page):
    """Every relative link names a file of the repository and, with #anchor, a heading of it."""
    broken = []
    for target in LINK.findall(prose(page)):
        if re.match(r"^[a-z]+:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.exists() or REPO.resolve() not in [resolved, *resolved.parents]:
            broken.append(f"{target}: no such file in the repository")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{target}: no heading #{anchor} in {resolved.relative_to(REPO.resolve())}")
    assert not broken, f"{name(page)}: " + "; ".join(broken)


def test_every_quoted_make_target_is_in_the_makefile():
    """Every `make <target>` quoted in code is defined in the Makefile."""
    targets = make_targets()
    assert {"demo", "test", "check"} <= targets, targets
    unknown = [(name(page), target) for page in PAGES for code in code_lines(page) + inline_code(page)
               for target in MAKE.findall(code) if target not in targets]
    assert not unknown, f"`make <target>` quoted with no such Makefile target: {unknown}"


def test_every_quoted_hpcshuffle_command_parses():
    """Each quoted command's whole argument list parses. A fragment in prose (inline code) may leave
    out required arguments; a bare `hpcshuffle <command>` is checked by its --help below."""
    commands = quoted_hpcshuffle_commands()
    assert len(commands) > 20, commands
    parser = strict_parser()
    failures = []
    for page, whole, argv in commands:
        if argv[0] in HYDRA_COMMANDS:
            if argv[0] == "simulate" and argv[1:2] and not PLACEHOLDER.match(argv[1]):
                try:
                    simulate_argv(argv[1:])  # M must be a positive integer
                except ValueError as err:
                    failures.append(f"{page}: hpcshuffle {' '.join(argv)}\n    {err}")
            continue
        if len(argv) == 1 or (len(argv) == 2 and argv[1] in nested_commands(parser, argv[0])):
            continue
        error = parse_error(parser, argv)
        if error and not (not whole and "the following arguments are required" in error):
            failures.append(f"{page}: hpcshuffle {' '.join(argv)}\n    {error}")
    assert not failures, "quoted commands that do not parse:\n" + "\n".join(failures)


def test_every_quoted_subcommand_has_help():
    """`hpcshuffle <command> [<subcommand>] --help` exits 0 for every one the pages quote."""
    parser = build_parser()
    named = set()
    for _, _, argv in quoted_hpcshuffle_commands():
        if argv[0] not in HYDRA_COMMANDS:
            named.add(tuple(argv[:2]) if argv[1:2] and argv[1] in nested_commands(parser, argv[0]) else (argv[0],))
    failures = [name for name in sorted(named) if parse_error(parser, [*name, "--help"])]
    assert not failures, f"--help fails for {failures}"
    assert ("scale", "calibrate") in named and ("synth", "digits") in named, named


def test_hpcshuffle_train_help_works(monkeypatch):
    """`hpcshuffle train` hands its arguments to Hydra: its --help composes the config and exits 0."""
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    with contextlib.redirect_stdout(io.StringIO()) as out, pytest.raises(SystemExit) as exit_info:
        main(["train", "--help"])
    assert exit_info.value.code == 0
    assert "shuffle" in out.getvalue()


def test_the_readme_accuracy_block_is_made_from_the_stored_studies():
    # every number of the README's accuracy section comes from results/reference's JSON
    made = accuracy_readme.block(*accuracy_readme.stored_studies())
    assert accuracy_readme.stored_block(REPO / "README.md") == made, (
        "the README's accuracy block differs from the stored studies: run python -m hpcshuffle.studies.accuracy_readme")


def test_the_readme_demo_block_is_made_from_the_stored_repeats():
    # the demo's table and its ranges over repeats come from results/reference/demo, and the ranges
    # stored in ratios.json are those of the runs stored beside it
    stored = json.loads((demo_runs.OUT / "ratios.json").read_text())
    assert stored == demo_runs.ratios(demo_runs.OUT) | {"cores": stored["cores"]}
    assert readme_blocks.stored_block(REPO / "README.md", demo_runs.BEGIN, demo_runs.END) == demo_runs.block(stored), (
        "the README's demo block differs from results/reference/demo: run python -m hpcshuffle.studies.demo_runs "
        "--readme-only")


def test_the_probe_round_the_readme_quotes_is_its_stored_comparison():
    """README's probe → predict row quotes round 2's compare.json, not numbers typed in."""
    found = json.loads((REPO / "results/reference/scale/probe/2026-11-29/compare.json").read_text())
    row = next(line for line in (REPO / "README.md").read_text().splitlines() if "one node's probe predict" in line)
    cells = found["cells"]
    assert f"median \\|error\\| {found['model_median_abs_err']:.1%} against {found['envelope_median_abs_err']:.1%}" \
        .replace("%", " %") in row
    assert f"in {round(found['model_pooled_coverage80'] * cells)} of {cells} cells (the model's own in " \
           f"{round(found['model_coverage80'] * cells)})" in row


def test_the_peers_page_quotes_the_stored_streaming_table():
    """docs/peers.md's table is streaming.txt, and streaming.txt is what benchmarks/peers.py makes of the runs
    stored in streaming.json (so neither is typed in)."""
    stored = json.loads((REPO / "results/reference/peers/streaming.json").read_text())
    image_bytes = stored["mds_written"]["image_bytes"]
    text = peers.table_text(peers.summarize(stored["runs"], image_bytes), image_bytes)
    assert (REPO / "results/reference/peers/streaming.txt").read_text() == text + "\n"
    assert text in (REPO / "docs/peers.md").read_text(), "docs/peers.md's table differs from streaming.txt"


def test_the_peers_page_quotes_the_stored_dlio_table():
    """The same for DLIO's comparison: dlio.txt is what benchmarks/peers.py makes of dlio.json's runs, and
    docs/peers.md quotes it."""
    stored = json.loads((REPO / "results/reference/peers/dlio.json").read_text())
    work = dlio_peer.DlioWorkload(**stored["workload"])
    text = dlio_peer.dlio_table_text(dlio_peer.summarize_dlio(stored["runs"], work, stored["image_bytes"]), work,
                                     stored["image_bytes"])
    assert (REPO / "results/reference/peers/dlio.txt").read_text() == text + "\n"
    assert text in (REPO / "docs/peers.md").read_text(), "docs/peers.md's table differs from dlio.txt"
