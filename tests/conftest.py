"""Shared fixtures: a small synthetic dataset, a runner for real `mpiexec` jobs, and finished runs."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest
from hypothesis import HealthCheck, settings

from hpcshuffle.formats.synthetic import synth_imagefolder
from hpcshuffle.plan import STRATEGIES, Strategy
from hpcshuffle.plan.streaming import PEERS_PYTHON
from hpcshuffle.storage.shared_io import shared_volume

REPO = Path(__file__).resolve().parents[1]
# 211 is prime: no worker count divides it, so partitions always differ in size
SMALL_SAMPLES = 211
SMALL_SHARD = 10  # images per tar shard of `small_shards`: 21 shards and a last one of 1
# trained at the size they are stored at: ImageNet's default of 224 would make every step of every
# test run convolve images 196 times as large for nothing the tests check
SMALL_IMAGE = 16
# what `train_args` trains unless overridden
EPOCHS = 3
BATCH = 8
# for runs whose every epoch checks the same facts: one epoch boundary is crossed
SHORT_EPOCHS = 2

# Hypothesis: `ci` (the default, every `make test`) draws 100 examples per property, `thorough` 1,000:
# HYPOTHESIS_PROFILE=thorough make check, before changing a planner
HYPOTHESIS_PROFILES = {"ci": 100, "thorough": 1000}
for _name, _examples in HYPOTHESIS_PROFILES.items():
    settings.register_profile(_name, max_examples=_examples, deadline=None,
                              suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# a strategy whose planner runs a peer's own package (plan/streaming.py) needs the peers' venv: `make test`
# makes it, `make check` does not
NO_PEERS_VENV = f"{PEERS_PYTHON} is missing: `make peers` makes it"


def can_plan(strategy: Strategy) -> bool:
    """Whether this checkout can plan `strategy`: every one can, except one that needs the peers' venv
    (`Strategy.peers_venv`) where `make peers` has not made it."""
    return not strategy.peers_venv or PEERS_PYTHON.exists()


def every_strategy_param() -> list:
    """Every entry of the strategy table as a pytest parameter, for the tests run over the whole table;
    one this checkout cannot plan (`can_plan`) skips, naming `make peers`."""
    return [pytest.param(strategy, id=name, marks=pytest.mark.skipif(not can_plan(strategy), reason=NO_PEERS_VENV))
            for name, strategy in STRATEGIES.items()]


# -- how much slower this machine is than the one the suite's deadlines were set on. A test that waits
# for something to happen waits `budget(s)`: s seconds there, s x the slowdown here. Measured once per
# session (two CPU-bound processes at once, so a busy core shows) unless HPCSHUFFLE_TEST_SLOWDOWN is set.
SLOWDOWN_ENV = "HPCSHUFFLE_TEST_SLOWDOWN"
CALIBRATION = "import time\nstarted = time.perf_counter()\ntotal = 0\nfor i in range(3_000_000):\n    total += i * i % 7\n" \
              "print(time.perf_counter() - started)"
CALIBRATION_REFERENCE_S = 0.35  # that loop, two at once, on the 2-core VM the deadlines were set on


def measure_slowdown() -> float:
    """The slower of two concurrent runs of CALIBRATION over its reference time (at least 1)."""
    runs = [subprocess.Popen([sys.executable, "-c", CALIBRATION], stdout=subprocess.PIPE, text=True) for _ in range(2)]
    slowest_s = max(float(run.communicate()[0]) for run in runs)
    return max(1.0, slowest_s / CALIBRATION_REFERENCE_S)


def slowdown() -> float:
    """This session's slowdown factor (pytest_configure sets it in the environment, for subprocesses too)."""
    return float(os.environ.get(SLOWDOWN_ENV, "1"))


def budget(seconds: float) -> float:
    """A wait of `seconds` on the reference machine, scaled to this one."""
    return seconds * slowdown()


def pytest_configure(config) -> None:
    if SLOWDOWN_ENV not in os.environ:
        os.environ[SLOWDOWN_ENV] = f"{measure_slowdown():.2f}"


def pytest_report_header(config) -> str:
    return f"{SLOWDOWN_ENV}={os.environ[SLOWDOWN_ENV]} (deadlines of waits are scaled by it)"


TIER_SECONDS: dict[str, float] = {}  # setup + call + teardown of every test, by its directory under tests/


def pytest_runtest_logreport(report) -> None:
    tier = report.nodeid.split("/")[1] if report.nodeid.startswith("tests/") else "other"
    TIER_SECONDS[tier] = TIER_SECONDS.get(tier, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter) -> None:
    """Where the session's time went, by tier (docs/testing.md keeps the suite's budget by these)."""
    if TIER_SECONDS:
        spent = sorted(TIER_SECONDS.items(), key=lambda item: -item[1])
        terminalreporter.write_line("time by tier (setup + call + teardown): "
                                    + ", ".join(f"{tier} {seconds:.0f} s" for tier, seconds in spent))


def mpi_env() -> dict[str, str]:
    env = dict(os.environ)
    # mpiexec comes with the `mpich` wheel, next to this interpreter
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    env["OMP_NUM_THREADS"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    return env


def run_mpi(
    ranks: int, args: list[str], timeout_s: float = 240, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """Run `mpiexec -n ranks python <args>`; a hang fails the test instead of blocking the suite, and
    shows where every thread of every rank (and loader worker) was: each gets SIGABRT, on which
    faulthandler (PYTHONFAULTHANDLER) prints their stacks."""
    command = ["mpiexec", "-n", str(ranks), sys.executable, *args]
    with subprocess.Popen(command, cwd=REPO, env={**mpi_env(), "PYTHONFAULTHANDLER": "1", **(env or {})},
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as launcher:
        try:
            stdout, stderr = launcher.communicate(timeout=timeout_s)
            hung = False
        except subprocess.TimeoutExpired:
            hung = True
            for process in psutil.Process(launcher.pid).children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    if process.name().startswith("python"):  # the ranks and their loader workers, not mpiexec's proxies
                        process.send_signal(signal.SIGABRT)
            try:
                stdout, stderr = launcher.communicate(timeout=budget(20))
            except subprocess.TimeoutExpired:
                launcher.kill()
                stdout, stderr = launcher.communicate()
    if hung:  # out of the except block: the TimeoutExpired would only repeat the output
        pytest.fail(f"{' '.join(command)} hung for {timeout_s} s; its output, then each process's stacks "
                    f"when stopped:\n{stdout[-4000:]}\n{stderr[-20000:]}", pytrace=False)
    return subprocess.CompletedProcess(command, launcher.returncode, stdout, stderr)


def train_args(dataset: Path, run_dir: Path, store: Path, *overrides: str, layout: str = "imagefolder") -> list[str]:
    return [
        "-m", "hpcshuffle.train",
        f"dataset={layout}", f"dataset.root={dataset}",
        f"hydra.run.dir={run_dir}", f"storage.local_dir={store}",
        f"batch_size={BATCH}", f"epochs={EPOCHS}", "progress=false", f"dataset.image_size={SMALL_IMAGE}",
        *overrides,
    ]


def audit_by_epoch(run_dir: Path) -> dict[int, list[dict]]:
    """audit.jsonl as {epoch: rows sorted by rank}."""
    from hpcshuffle.files import read_jsonl

    by_epoch: dict[int, list[dict]] = {}
    for row in read_jsonl(run_dir / "audit.jsonl"):
        by_epoch.setdefault(row["epoch"], []).append(row)
    return {epoch: sorted(rows, key=lambda r: r["rank"]) for epoch, rows in by_epoch.items()}


def dead_pack_bytes(store_root: Path, block: int = 4096) -> int:
    """Bytes a store's packs keep allocated that hold no sample the store holds (nor a trailer):
    what punching out the samples that left should have freed. A pack no manifest names counts whole."""
    manifest = json.loads((store_root / "manifest.json").read_text())
    keep: dict[str, list[tuple[int, int]]] = {}
    for _, _, nbytes, _, _, *packed in manifest["samples"].values():
        if packed:
            keep.setdefault(packed[0], []).append((packed[1], packed[1] + nbytes))
    dead = 0
    for pack in (store_root / "packs").glob("*.pack"):
        size = pack.stat().st_size
        with open(pack, "rb") as source:
            source.seek(size - 16)
            trailer_bytes = int.from_bytes(source.read(8), "little")
            kept = merge([(start // block * block, -(-end // block) * block)
                          for start, end in [*keep.get(pack.stem, []), (size - 16 - trailer_bytes, size)]])
            extents, offset = [], 0
            while offset < size:
                try:
                    start = os.lseek(source.fileno(), offset, os.SEEK_DATA)
                except OSError:  # ENXIO: only a hole from here
                    break
                offset = os.lseek(source.fileno(), start, os.SEEK_HOLE)
                extents.append((start, offset))
        if pack.stem not in keep:
            dead += sum(end - start for start, end in extents)
            continue
        for start, end in extents:
            dead += end - start - sum(max(0, min(end, k_end) - max(start, k_start)) for k_start, k_end in kept)
    return dead


def merge(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted, overlapping or touching intervals joined."""
    merged: list[tuple[int, int]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


@pytest.fixture(scope="session")
def small_dataset(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("data") / "small"
    return synth_imagefolder(root, SMALL_SAMPLES, num_classes=4, num_val_samples=40, image_size=SMALL_IMAGE,
                             progress=False)


@pytest.fixture(scope="session")
def small_shards(small_dataset, tmp_path_factory) -> Path:
    """`small_dataset` packed into WebDataset tar shards of SMALL_SHARD images (`hpcshuffle pack`)."""
    from hpcshuffle.formats.webdataset import pack

    root = tmp_path_factory.mktemp("data") / "small_shards"
    pack(small_dataset, root, shard_samples=SMALL_SHARD, progress=False)
    return root


@pytest.fixture(scope="session")
def trained(small_dataset, tmp_path_factory) -> Callable[..., Path]:
    """`trained(ranks, *overrides)`: a finished `mpiexec -n ranks` training run on the small dataset.

    Returns the directory holding the run's `run/` and `store/`. Each distinct (ranks, overrides)
    trains once per session and every test that asks for it shares it, so tests only read it:
    several facts of one run cost one run, not one each.
    """
    runs: dict[tuple, Path] = {}

    def run(ranks: int, *overrides: str) -> Path:
        key = (ranks, *overrides)
        if key not in runs:
            root = tmp_path_factory.mktemp("trained")
            result = run_mpi(ranks, train_args(small_dataset, root / "run", root / "store", *overrides))
            assert result.returncode == 0, result.stderr[-3000:]
            runs[key] = root
        return runs[key]

    return run


# -- the GlusterFS mount (scripts/shared_fs.sh), for the gluster tier and the benchmarks that read it

SHARED_FS = ["bash", "scripts/shared_fs.sh"]


def shared_fs_script(action: str, timeout_s: float) -> subprocess.CompletedProcess:
    return subprocess.run([*SHARED_FS, action], check=False, cwd=REPO, capture_output=True, text=True, timeout=timeout_s)


@pytest.fixture(scope="session")
def shared_fs() -> Iterator[Path]:
    """The GlusterFS volume mounted here, or one started (and stopped at the session's end) for the
    tests: the package's `shared_volume`. Starting needs root, as CI has, and there a volume that does
    not come up fails the tests; without root and without a mounted volume (`make test` on a
    workstation) they skip, saying what they need. A volume already mounted when the session began is
    left mounted."""
    with shared_volume() as (mount, how):
        if mount is None and os.geteuid() != 0:
            pytest.skip(f"the gluster tests need the GlusterFS volume mounted (scripts/shared_fs.sh status fails) "
                        f"or root to start it with scripts/shared_fs.sh start: {how}")
        assert mount is not None, f"could not start the shared file system: {how}"
        yield mount


def cli_error(capsys, *argv: str) -> str:
    """Run `hpcshuffle ARGV` that must be refused: exit code 2, nothing on stdout; returns stderr."""
    from hpcshuffle.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(list(argv))
    assert exit_info.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    return captured.err
