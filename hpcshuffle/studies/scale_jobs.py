"""The scale study's simulations (experiments/scale_study.py): a job is a platform file, the changes the
study makes to it and a scenario; each is simulated once (`hpcshuffle.scale.engine.simulate`, one forked
SimGrid process) and cached as json under `<out>/cache/`, keyed by the platform file's sha256, the
changes, the scenario and the simulator's code (`code_digest`), so a rerun simulates only what is
missing or what a changed platform or engine invalidated."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import yaml

from hpcshuffle.plan import run_label
from hpcshuffle.scale.engine import simulate
from hpcshuffle.scale.platform import Platform
from hpcshuffle.scale.platform_yaml import (
    platform_from_dict,
    platform_path,
    with_values,
)
from hpcshuffle.scale.scenario import PHASES, Result, Scenario, check_scenario


@dataclass(frozen=True)
class Setup:
    """A platform file plus the changes this study makes to it (recorded, and part of the cache key):
    `values` maps dotted paths of the yaml to what they are set to (platform.with_values)."""

    name: str
    platform: str  # conf/platform/<name>.yaml
    values: dict = field(default_factory=dict)

    def changes(self) -> dict:
        """The dotted paths of the platform yaml this setup sets, and their values."""
        return self.values


@dataclass
class Job:
    """One row of a figure: its figure and label, the setup and the scenario simulated for it."""

    figure: str
    label: str
    setup: Setup
    scenario: Scenario
    scale: float = 1.0  # simulated seconds x scale = seconds per epoch (Fig. 10 simulates part of an epoch)


class Platforms:
    """Each platform file read once (bytes → sha256 → Platform), so the key and the simulation agree."""

    def __init__(self) -> None:
        self.raw: dict[str, tuple[str, dict, str]] = {}

    def get(self, setup: Setup) -> tuple[Platform, str]:
        """The setup's platform with its changes made, and the sha256 of its file as read."""
        if setup.platform not in self.raw:
            path = platform_path(setup.platform)
            data = path.read_bytes()
            self.raw[setup.platform] = (hashlib.sha256(data).hexdigest(), yaml.safe_load(data), str(path))
        digest, raw, source = self.raw[setup.platform]
        return with_values(platform_from_dict(raw, source), setup.values), digest


def code_digest() -> str:
    """sha256 of the code that decides a simulated epoch: the engine, the scenario's records, the platform
    and its loader, the traffic and the plan (a changed engine is simulated again, as a changed platform
    file is): hpcshuffle/scale/engine.py, scenario.py, platform.py, platform_yaml.py, traffic.py,
    storage.py, slots.py and hpcshuffle/plan/*.py, each file's name and bytes (the cache's keys depend
    on exactly these: another file added here would simulate every cached row again)."""
    package = Path(__file__).resolve().parents[1]  # hpcshuffle/
    files = [package / "scale" / name for name in ("engine.py", "scenario.py", "platform.py", "platform_yaml.py",
                                                    "traffic.py", "storage.py", "slots.py")]
    files += sorted((package / "plan").glob("*.py"))
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


CODE_SHA256 = code_digest()


def cache_key(digest: str, setup: Setup, scenario: Scenario) -> str:
    """The cache key of simulating `scenario` on `setup` (whose platform file has sha256 `digest`)."""
    text = json.dumps({"platform_sha256": digest, "code_sha256": CODE_SHA256, "platform": setup.platform,
                       "changes": setup.changes(), "scenario": asdict(scenario)}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def cache_path(out: Path, setup: Setup, scenario: Scenario, key: str) -> Path:
    """Where the simulation of `key` is cached under `out`, named so that a reader can tell which it is."""
    q = "" if scenario.q is None else f"-q{scenario.q:g}"
    return (out / "cache" / f"{setup.name}-{scenario.model}-{scenario.shuffle}{q}-M{scenario.workers}"
            f"-b{scenario.batch_size}-{key[:16]}.json")


def run_jobs(jobs: list[Job], out: Path, jobs_at_once: int) -> dict[int, tuple[Result, str, bool]]:
    """Every job's Result (from the cache or simulated now), its platform sha256, and whether it was cached."""
    platforms = Platforms()
    resolved: dict[int, tuple[Result, str, bool]] = {}
    pending: dict[str, tuple[Platform, Scenario, Path, str, Setup]] = {}
    waiting: dict[str, list[int]] = {}
    for index, job in enumerate(jobs):
        platform, digest = platforms.get(job.setup)
        check_scenario(platform, job.scenario)  # before any simulation, not after
        key = cache_key(digest, job.setup, job.scenario)
        path = cache_path(out, job.setup, job.scenario, key)
        if path.exists():
            resolved[index] = (Result(**json.loads(path.read_text())["result"]), digest, True)
        else:
            pending.setdefault(key, (platform, job.scenario, path, digest, job.setup))
            waiting.setdefault(key, []).append(index)
    cached = len(resolved)
    print(f"{len(jobs)} rows: {cached} from the cache, {len(pending)} simulations to run, {jobs_at_once} at a time",
          flush=True)
    # the largest runs first, so the last ones to finish are short (a rough cost: exchange-heavy first)
    order = sorted(pending, key=lambda k: (pending[k][1].shuffle != "partial", -(pending[k][1].q or 0),
                                           -pending[k][1].workers))
    started = time.perf_counter()
    (out / "cache").mkdir(parents=True, exist_ok=True)

    def one(key: str) -> tuple[str, Result]:
        platform, scenario, _, _, _ = pending[key]
        return key, simulate(platform, scenario)

    with ThreadPoolExecutor(max_workers=max(1, jobs_at_once)) as pool:
        futures = [pool.submit(one, key) for key in order]
        for done, future in enumerate(as_completed(futures), 1):
            key, result = future.result()
            platform, scenario, path, digest, setup = pending[key]
            record = {"platform": platform.name, "platform_file": platform.source, "platform_sha256": digest,
                      "code_sha256": CODE_SHA256,
                      "changes": setup.changes(), "scenario": asdict(scenario), "result": asdict(result),
                      "simulated_at": f"{datetime.now(timezone.utc):%Y-%m-%dT%H:%M:%SZ}"}
            path.write_text(json.dumps(record, indent=1) + "\n")
            for index in waiting[key]:
                resolved[index] = (result, digest, False)
            print(f"[{done}/{len(order)}] {setup.name} {scenario.model} {run_label(scenario.shuffle, result.q)} "
                  f"M={scenario.workers}: epoch {result.epoch_s:.1f} s simulated in {result.wall_s:.0f} s wall "
                  f"({time.perf_counter() - started:.0f} s so far)", flush=True)
    return resolved


def rows_of(jobs: list[Job], results: dict[int, tuple[Result, str, bool]], figure: str) -> list[tuple[Job, Result]]:
    """The rows of `figure`, seconds per epoch (a part-epoch's seconds scaled by the job's `scale`)."""
    rows = []
    for i, job in enumerate(jobs):
        if job.figure == figure:
            r = results[i][0]
            if job.scale != 1.0:
                r = dataclasses.replace(r, **{f"{p}_s": getattr(r, f"{p}_s") * job.scale for p in (*PHASES, "epoch")})
            rows.append((job, r))
    return rows

