"""The training thread's jitter (`exchange.noise`) from a measured iteration of ranks that share cores.

When more ranks than cores run FW+BW between barriers (the namespace cluster: every node is a
namespace of one machine), the engine shares the cores fairly: each of the k ranks still
computing gets min(1, cores / k) of a core (SimGrid's max-min sharing of one host's cores). The
operating system does not: it runs one rank's slice while another waits, so the iteration,
which waits for the last rank, takes longer than fair sharing says. The model has one knob for
that wait: each rank's FW+BW carries a draw of `exchange.noise`, extra seconds of work.

`fit_noise` picks that knob's mean so that the engine's sharing (`shared_makespan`, the same
rule) gives the measured mean iteration: one number fitted to one measurement, taken on the
machine and at the rank count that the prediction is for. Its spread is not measured: the draw
is lognormal with cv `NOISE_CV`, an assumption a reader can change.
"""

from __future__ import annotations

import numpy as np

from hpcshuffle.scale.platform import Distribution

NOISE_CV = 1.0  # ASSUMPTION: the spread of the draw (standard deviation over mean)
DRAWS = 4000  # iterations the fit averages over, each one draw per rank
FIT_SEED = 0x7177


def shared_makespan(works: np.ndarray, cores: float) -> float:
    """Seconds until every one of `works` (seconds of one core's work each) is done when the tasks
    share `cores` fairly, each running at min(1, cores / tasks still running)."""
    remaining = np.sort(np.asarray(works, dtype=float))
    clock, done = 0.0, 0.0
    for index, work in enumerate(remaining):
        rate = min(1.0, cores / (len(remaining) - index))  # every unfinished task runs at this rate
        clock += (work - done) / rate
        done = work
    return clock


def mean_iteration(step_s: float, noise: Distribution, ranks: int, cores: float, draws: int = DRAWS,
                   seed: int = FIT_SEED) -> float:
    """The engine's mean iteration: `ranks` FW+BW of `step_s` seconds each plus a draw of `noise`,
    sharing `cores`, over `draws` iterations (seeded)."""
    rng = np.random.default_rng(seed)
    extra = noise.sample(rng, draws * ranks).reshape(draws, ranks) if noise.mean else np.zeros((draws, ranks))
    return float(np.mean([shared_makespan(step_s + row, cores) for row in extra]))


def fit_noise(step_s: float, measured_s: float, ranks: int, cores: float, cv: float = NOISE_CV) -> Distribution:
    """The `exchange.noise` whose mean makes `mean_iteration` equal `measured_s`, the mean iteration
    measured with `ranks` ranks on `cores` cores, each rank's FW+BW `step_s` seconds alone.

    A fixed 0 where the measured iteration is no longer than fair sharing already gives: the model
    then has nothing to add."""
    quiet = Distribution("fixed", 0.0)
    if measured_s <= mean_iteration(step_s, quiet, ranks, cores):
        return quiet
    low, high = 0.0, measured_s  # a mean of one whole iteration per rank is more than enough
    for _ in range(30):  # to a billionth of an iteration
        middle = (low + high) / 2
        if mean_iteration(step_s, Distribution("lognormal", middle, cv), ranks, cores) < measured_s:
            low = middle
        else:
            high = middle
    return Distribution("lognormal", (low + high) / 2, cv)
