"""Blocks of the README written from stored results: the lines between a BEGIN and an END marker
are made by a study module, so no number in them can go stale (tests/unit/test_docs.py makes each
block again and fails where the README differs)."""

from __future__ import annotations

from pathlib import Path


def stored_block(readme: Path, begin: str, end: str) -> str:
    """The block between `begin` and `end` as the README holds it now."""
    text = readme.read_text()
    return text[text.index(begin) + len(begin) : text.index(end)].strip("\n")


def rewrite_block(readme: Path, begin: str, end: str, made: str) -> bool:
    """Put `made` between the README's markers; True if the block changed."""
    text = readme.read_text()
    start, stop = text.index(begin) + len(begin), text.index(end)
    made = "\n" + made + "\n"
    readme.write_text(text[:start] + made + text[stop:])
    return text[start:stop] != made
