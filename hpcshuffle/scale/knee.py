"""PLS against LS over seeds without SimGrid: what per-rank noise does to the exchange (issue 46).

On a platform where LS's epoch is the same on every rank but for `exchange.noise` (a node's SSD, in the
loop, accelerators: order_stats' LS), every rank starts each iteration together after the allreduce's
barrier, so an iteration's length is its deterministic parts plus, at each barrier, the largest of M
i.i.d. noise draws. The largest of M draws is F⁻¹(U^{1/M}) for one uniform U (`extreme_quantile`), so
a seed costs one uniform per barrier, not M; an epoch is a sum over many barriers of such maxima, whose
distribution over seeds is found by seeded Monte Carlo of those uniforms (`SEEDS` seeds).

Per iteration i of b_i samples, as scale/engine.py charges it:
- LS: io_i (⌈b_i/workers⌉ local file latencies, the loader's CPU over its workers, the node's SSD
  shared by its ranks), b_i·fwbw_per_sample + max_M(noise), the exposed allreduce (`Allreduce.exposed`).
- `kakurenbo` (scale/slots.py): LS plus s_i slots of slot_cpu + max_M(noise) + ⌈log₂M⌉·alpha, with
  s_i from SlotExchange's split of ⌈q·N/M⌉, one more barrier (⌈log₂M⌉·alpha) at the start of the
  iteration after one with slots, and at the epoch's end. Its FW+BW draws are not LS's (the slots draw
  in between), so the two epochs' maxima are independent.
- `hpcshuffle`: LS plus the exchange on the training thread, the same on every rank: reading the
  largest rank's sends of the iteration (the plan's, at the scenario's seed) from the node's SSD (its
  ranks at once) while the previous iteration's received samples are written to it (read and writes
  share max(read, write) bandwidth, the write at most its own: SimGrid's disk, as the agreement in
  results/reference/scale/knee.txt shows), and cpu_per_sample per sample; at the end, the last writes
  and epoch_overhead. Its FW+BW draws are LS's at the same seed (the engine draws them in the same order).
Dropped: the wait for exchange messages (landed during FW+BW: the slots' messages are 0.4 MB each),
and, for `hpcshuffle`, the ranks' spread of sends (±1-2 samples an iteration; the largest is taken).
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from hpcshuffle.plan import PATH_EXCHANGE, get_strategy
from hpcshuffle.scale.order_stats import (
    exposed_allreduce,
    extreme_quantile,
    iteration_batches,
    local_io,
    refuse,
)
from hpcshuffle.scale.platform import Platform
from hpcshuffle.scale.scenario import Scenario, check_scenario
from hpcshuffle.scale.seeds import Spread
from hpcshuffle.scale.traffic import epoch_traffic

SEEDS = 100  # seeded Monte Carlo draws of an epoch's barriers


def check_knee(platform: Platform, scenario: Scenario) -> None:
    """ValueError naming the knob where PLS's epoch does not reduce to barriers of M i.i.d. noise draws."""
    check_scenario(platform, scenario)
    strategy = get_strategy(scenario.shuffle)
    if strategy.data_path != PATH_EXCHANGE or strategy.q_for(scenario.q) <= 0:
        raise ValueError(f"shuffle={scenario.shuffle} q={scenario.q} exchanges nothing: the knee path compares "
                         "PLS at q > 0 with LS (order_stats.breakdown has LS alone)")
    refusals = {
        "loader.prefetch": (platform.loader.prefetch != 0, "must be 0 (reads in the loop)"),
        "machine_cores": (platform.machine_cores != 0, "must be 0 (each node its own cores)"),
        "accelerators_per_node": (platform.accelerators_per_node == 0,
                                  "must be > 0 (FW+BW and the training thread's CPU must not contend)"),
        "scenario.scope": (scenario.scope != "rank", "must be rank"),
        "scenario.workers": (scenario.workers < 2, "must be >= 2 (one rank exchanges nothing)"),
    }
    refuse(refusals, f"the knee path (platform {platform.name})")


def local_iterations(platform: Platform, scenario: Scenario) -> tuple[np.ndarray, np.ndarray]:
    """Per iteration, LS's seconds without noise (io + FW+BW + exposed allreduce) and its batch."""
    batches = iteration_batches(platform, scenario)
    fwbw = batches * platform.model(scenario.model).fwbw_per_sample
    return local_io(platform, scenario, batches) + fwbw + exposed_allreduce(platform, scenario, batches), batches


def slots_per_iteration(platform: Platform, scenario: Scenario) -> np.ndarray:
    """The authors' scheduler's slots at each iteration, as SlotExchange splits ⌈q·N/M⌉ (every rank alike)."""
    spec = scenario.spec(platform)
    base, extra = divmod(math.ceil(spec.q * spec.num_samples / spec.num_ranks), spec.iterations)
    return base + (np.arange(spec.iterations) < extra)


def slot_fixed(platform: Platform, scenario: Scenario, slot_cpu: float | None = None) -> float:
    """Seconds of the authors' exchange over the epoch without noise: every slot's slot_cpu and barrier,
    and the barrier after each iteration with slots (`slot_cpu`: the platform's unless given)."""
    slots = slots_per_iteration(platform, scenario)
    barrier = math.ceil(math.log2(scenario.workers)) * platform.allreduce.alpha
    cpu = platform.exchange.slot_cpu if slot_cpu is None else slot_cpu
    return float(slots.sum() * (cpu + barrier) + np.count_nonzero(slots) * barrier)


@lru_cache(maxsize=16)
def _moves(spec, shuffle: str, epoch: int) -> tuple[np.ndarray, np.ndarray]:
    """Per iteration, the largest rank's sends and receives in the plan of `spec` (at its seed)."""
    traffic = epoch_traffic(spec, shuffle, epoch)
    shape, sends = (spec.num_ranks, traffic.iterations), traffic.sends
    out, into = np.zeros(shape, dtype=np.int64), np.zeros(shape, dtype=np.int64)
    np.add.at(out, (sends.owner, sends.iteration), sends.samples)
    np.add.at(into, (sends.peer, sends.iteration), sends.samples)
    return out.max(axis=0), into.max(axis=0)


def exchange_fixed(platform: Platform, scenario: Scenario) -> float:
    """Seconds of hpcshuffle's exchange on the training thread over the epoch (no noise in it)."""
    sent, received = _moves(scenario.spec(platform), scenario.shuffle, scenario.epoch)
    unit = platform.ranks_per_node * platform.dataset(scenario.dataset).sample_bytes
    read_bw, write_bw = platform.local.read_bandwidth, platform.local.write_bandwidth
    total = max(read_bw, write_bw)  # max-min sharing of the disk by a read and a write at once
    write_rate = min(write_bw, max(total / 2, total - read_bw))
    read_rate = min(read_bw, total - write_rate)
    seconds = 0.0
    for reads, writes in zip(sent * unit, np.r_[0, received[:-1]] * unit):
        if not writes or reads / read_rate <= writes / write_rate:
            seconds += reads / (read_rate if writes else read_bw)
        else:  # the writes end first: the rest of the read at full speed
            seconds += writes / write_rate + (reads - writes / write_rate * read_rate) / read_bw
    exchange = platform.exchange
    return float(seconds + sent.sum() * exchange.cpu_per_sample + received[-1] * unit / write_bw
                 + exchange.epoch_overhead * (sent.sum() > 0))


def epochs(platform: Platform, scenario: Scenario, seeds: int = SEEDS,
           slot_cpu: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """LS's and PLS's epoch (seconds) at each of `seeds` seeded draws: (local, partial), paired by seed.
    `slot_cpu` replaces the platform's for the authors' scheduler (a refit)."""
    check_knee(platform, scenario)
    if seeds < 1:
        raise ValueError(f"seeds must be >= 1, got {seeds}")
    base, batches = local_iterations(platform, scenario)
    noise, ranks = platform.exchange.noise, scenario.workers
    rngs = [np.random.default_rng([seed, ranks, 0x4EE]) for seed in range(seeds)]
    maxima = np.array([extreme_quantile(noise, ranks, rng.random(len(batches))).sum() for rng in rngs])
    local = base.sum() + maxima
    if platform.exchange.scheduler != "kakurenbo":
        return local, local + exchange_fixed(platform, scenario)
    slots = int(slots_per_iteration(platform, scenario).sum())
    drawn = np.array([extreme_quantile(noise, ranks, rng.random(slots + len(batches))).sum() for rng in rngs])
    return local, base.sum() + slot_fixed(platform, scenario, slot_cpu) + drawn


def ratio(platform: Platform, scenario: Scenario, seeds: int = SEEDS, slot_cpu: float | None = None) -> Spread:
    """PLS's epoch over LS's, paired by seed, over `seeds` seeds: median and p10/p90."""
    local, partial = epochs(platform, scenario, seeds, slot_cpu)
    return Spread.of(partial / local)


def refit_slot_cpu(platform: Platform, scenario: Scenario, target: float, seeds: int = SEEDS) -> float | None:
    """The slot_cpu at which the median of PLS/LS is `target` for the authors' scheduler (the same draws
    at every slot_cpu, so the median rises linearly in it); None where the noise alone exceeds `target`."""
    slots = float(slots_per_iteration(platform, scenario).sum())
    local, partial = epochs(platform, scenario, seeds, slot_cpu=0.0)
    if np.median(partial / local) > target:
        return None
    low, high = 0.0, 1.0
    for _ in range(60):  # bisection on the median of (partial + slots·x) / local
        middle = (low + high) / 2
        low, high = (middle, high) if np.median((partial + slots * middle) / local) < target else (low, middle)
    return (low + high) / 2
