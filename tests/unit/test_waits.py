"""No test waits for something with a fixed budget under 30 s: a machine 1.5-1.7x slower than the
one the budget was set on (CI's, seen) would fail it by chance. A wait is `budget(s)`
(tests/conftest.py: s seconds scaled by the session's measured slowdown); a timeout that a test
means to expire says so on its line (`# expires by design`), as does one never waited on."""

from __future__ import annotations

import re
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
SHORT_S = 30
FIXED = [
    re.compile(r"(?<![.\w])timeout(?:_s)?\s*=\s*(\d+(?:\.\d+)?)\b"),  # timeout=10, timeout_s=0.5 (not a.timeout_s=)
    re.compile(r"monotonic\(\)\s*\+\s*(\d+(?:\.\d+)?)\b"),  # deadline = time.monotonic() + 10
    re.compile(r"\.(?:join|get|wait)\(\s*(\d+(?:\.\d+)?)\s*\)"),  # child.join(10)
]
POLL = re.compile(r"for _ in range\((\d+)\):")  # a loop of N tries ...
SLEEP = re.compile(r"\bsleep\((\d+(?:\.\d+)?)\)")  # ... that sleeps between them
EXEMPT = ("budget(", "# expires by design", "# never waited on")


def fixed_waits(path: Path) -> list[str]:
    """`path:line: text` of each wait on a fixed number of seconds under SHORT_S."""
    lines = path.read_text().splitlines()
    found = []
    for number, line in enumerate(lines, 1):
        if any(mark in line for mark in EXEMPT):
            continue
        code = line.split("#")[0]  # a comment may quote a timeout
        short = [m for pattern in FIXED for m in pattern.finditer(code) if float(m.group(1)) < SHORT_S]
        poll = POLL.search(code)
        if poll:
            sleeps = [float(s.group(1)) for s in SLEEP.finditer("\n".join(lines[number : number + 6]))]
            short += [poll] if sleeps and int(poll.group(1)) * max(sleeps) < SHORT_S else []
        found += [f"{path.name}:{number}: {line.strip()}"] if short else []
    return found


def test_no_test_waits_a_fixed_time_under_30_s():
    found = [f"{path.parent.name}/{hit}" for path in sorted(TESTS.rglob("*.py")) if path.name != "test_waits.py"
             for hit in fixed_waits(path)]
    assert not found, "fixed waits a slower machine can outlast; use budget(s) from tests/conftest.py:\n" + "\n".join(found)


def test_the_check_finds_what_it_looks_for(tmp_path):
    sample = tmp_path / "test_sample.py"
    sample.write_text(
        "for _ in range(100):\n    time.sleep(0.05)\n"  # 5 s of polls
        "child.join(timeout=10)\n"
        "deadline = time.monotonic() + 10\n"
        "deadline = time.monotonic() + budget(10)\n"
        "run(timeout=300)\n"
        "Peers(world, timeout_s=0.5)  # expires by design\n"
    )
    assert [hit.split(":")[1] for hit in fixed_waits(sample)] == ["1", "3", "4"]
