"""Which q can a cluster afford? Per worker count, the largest q whose simulated epoch stays
within a tolerance of local shuffling's (tune-q answers the other half: which q accuracy needs).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from hpcshuffle.errors import at_least
from hpcshuffle.plan import with_role
from hpcshuffle.scale.engine import simulate
from hpcshuffle.scale.platform import Platform
from hpcshuffle.scale.scenario import Result, Scenario

DEFAULT_QS = (0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 1.0)


def simulate_all(platform: Platform, scenarios: list[Scenario], progress: Callable[[str], None],
                 jobs: int = 1) -> list[Result]:
    """Every scenario, `jobs` simulations at a time (each is its own process), in the given order."""
    return simulate_each([("", platform, scenario) for scenario in scenarios], progress, jobs, simulate)


def simulate_each(runs: list[tuple[str, Platform, Scenario]], progress: Callable[[str], None], jobs: int,
                  simulate_one: Callable[[Platform, Scenario], Result]) -> list[Result]:
    """Each (label, platform, scenario) by `simulate_one`, `jobs` at a time, in order; a progress line each."""

    def one(numbered: tuple[int, tuple[str, Platform, Scenario]]) -> Result:
        number, (label, platform, scenario) = numbered
        result = simulate_one(platform, scenario)
        scope = " (node scope)" if scenario.scope == "node" else ""
        progress(f"[{number}/{len(runs)}] {label + ': ' if label else ''}{scenario.shuffle} q={result.q:g}{scope} at "
                 f"{scenario.workers} workers: epoch {result.epoch_s:.1f} s simulated in {result.wall_s:.0f} s")
        return result

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        return list(pool.map(one, enumerate(runs, 1)))


def affordable_q(results: list[Result], tolerance: float) -> dict[tuple[int, str], tuple[float | None, float]]:
    """Per (worker count, scope): (the largest q with epoch ≤ (1 + tolerance) × LS's epoch in that
    scope, or None; LS's epoch)."""
    at_least("tolerance", tolerance, 0, "(a fraction of LS's epoch, e.g. 0.1)")
    baseline = with_role("baseline").name
    answer: dict[tuple[int, str], tuple[float | None, float]] = {}
    for workers, scope in sorted({(r.workers, r.scope) for r in results}):
        runs = [r for r in results if (r.workers, r.scope) == (workers, scope)]
        local = next((r.epoch_s for r in runs if r.shuffle == baseline), None)
        if local is None:
            raise ValueError(f"no {baseline} run at {workers} workers in {scope} scope to compare with")
        within = [r.q for r in runs if r.shuffle != baseline and r.epoch_s <= (1 + tolerance) * local]
        answer[workers, scope] = (max(within) if within else None, local)
    return answer


def recommendation_table(results: list[Result], tolerance: float) -> str:
    """Per (workers, scope), the largest q whose simulated epoch is within `tolerance` of local
    shuffling's, with every q's epoch / LS ratio. ValueError where a group has no local run."""
    baseline = with_role("baseline").name
    rows = [(workers, scope, local, q, "  ".join(f"{r.q:g}:{r.epoch_s / local:.2f}" for r in results
                                                 if (r.workers, r.scope) == (workers, scope) and r.shuffle != baseline))
            for (workers, scope), (q, local) in affordable_q(results, tolerance).items()]
    return recommendation_lines(f"largest q whose simulated epoch is within {tolerance:.0%} of local shuffling's",
                                "epoch / LS per q", rows)


def recommendation_lines(title: str, per_q: str, rows: list[tuple[int, str, float, float | None, str]]) -> str:
    """The --recommend table: `title`, a header naming the `per_q` column, a line per (workers, scope,
    LS's epoch, the largest affordable q or None, each q's ratio to LS) and where tune-q comes in."""
    lines = [title, f"{'workers':>7} {'scope':>5} {'LS epoch s':>11} {'q':>6}   {per_q}"]
    lines += [f"{workers:>7} {scope:>5} {local:>11.1f} {('none' if q is None else f'{q:g}'):>6}   {ratios}"
              for workers, scope, local, q, ratios in rows]
    lines.append("tune-q names the q accuracy needs (hpcshuffle tune-q RUNS...); run the larger of the two "
                 "only if this cluster affords it")
    return "\n".join(lines)
