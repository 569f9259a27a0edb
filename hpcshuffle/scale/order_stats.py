"""The GS/LS phase breakdown over seeds without SimGrid: order statistics of the per-node client factor.

Where the engine's (scale/engine.py) shared-storage cost reduces to one factor per node, a rank's
I/O over the epoch is a line in its node's factor c: io(c) = A + B·c + D, with B = file_latency ·
Σᵢ⌈bᵢ/workers⌉ (the RPCs of the longest worker chain of each batch of bᵢ files). The fastest and
slowest rank are then the nodes with the smallest and largest of n i.i.d. factors, whose quantiles
are exact: F_min⁻¹(p) = F⁻¹(1 − (1−p)^{1/n}), F_max⁻¹(p) = F⁻¹(p^{1/n}). The epoch waits for the
slowest rank at every iteration, so it is a function of the largest factor alone, and exact too.

Kept, per iteration (all ranks start it together, after the allreduce's barrier):
- each file's RPCs (`client_spread`·`file_latency`) and the mean `service`, chained over ⌈b/workers⌉
  files by the longest worker; the slowest of the workers' (and, for the iteration's end, of the
  slowest node's ranks') chains is the mean plus √k·σ_S times the expected largest of that many
  standard normals (a normal approximation of a chain of k service draws);
- `loader.cpu_per_file` + `shared.client_cpu_per_file` per file, spread over the workers, while the
  bytes flow (as the engine: a batch costs its RPCs, then the longer of its decoding and its bytes);
- the metadata service's opens/s and the servers' bandwidth, each shared equally by the ranks reading
  it at once (processor sharing, as SimGrid shares a disk), with the ranks arriving at their chains'
  ends; the other nodes' factors sit at their expected quantiles (j + ½)/n (an approximation);
- LS: ⌈b/workers⌉ local file latencies and the node's SSD shared by its ranks; FW+BW; the
  allreduce's barrier and its exposed α–β time (`Allreduce.exposed`).
- the wait in the servers' queues behind this job's own requests, as one M/G/1 wait per file at the
  load of every worker chaining its files (`queue_wait`; refused above `MAX_UTILISATION`).
Dropped: the booking order of scale/storage.py (a rank booked first waits less), the lighter load
late in an iteration, when the fast ranks are done (so the slow ranks' waits are overstated, by
milliseconds), and the per-iteration scatter of the service draws (it averages over the epoch). The mean over ranks is not an order statistic: it, and the mean allreduce (the epoch less a
rank's I/O and FW+BW), come from `DRAWS` seeded draws of the n factors alone (a stated approximation;
the same draws at every parameter, so a fit sees a smooth function).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy import integrate, optimize, special, stats

from hpcshuffle.plan import PATH_EXCHANGE, PATH_LOANS, get_strategy
from hpcshuffle.scale.platform import BACKWARD_SHARE, Distribution, Platform
from hpcshuffle.scale.scenario import Scenario, check_scenario
from hpcshuffle.scale.seeds import SPREAD_PROBABILITIES, Spread, varies
from hpcshuffle.scale.storage import SharedQueues

DRAWS = 4000  # seeded draws of the n factors, for the mean over ranks
MAX_UTILISATION = 0.5  # of the servers by this job over the median rank's I/O: above, the M/G/1 wait is not trusted


@dataclass(frozen=True)
class Breakdown:
    """Seconds per epoch over seeds, as a Result's fields: the mean I/O over ranks, the fastest and the
    slowest rank's, the mean allreduce and the epoch (each a Spread); FW+BW, the same at every seed."""

    io_s: Spread
    io_min_s: Spread
    io_max_s: Spread
    allreduce_s: Spread
    epoch_s: Spread
    fwbw_s: float


def quantile(distribution: Distribution, u):
    """F⁻¹(u) of `distribution` (fixed, lognormal or pareto, as `Distribution.sample` draws it)."""
    u = np.asarray(u, dtype=np.float64)
    if not varies(distribution):
        return np.full(u.shape, distribution.mean)
    if distribution.dist == "lognormal":
        sigma = math.sqrt(math.log1p(distribution.cv ** 2))
        return np.exp(math.log(distribution.mean) - sigma * sigma / 2 + sigma * special.ndtri(u))
    scale = distribution.mean * (distribution.shape - 1) / distribution.shape
    return scale * (1.0 - u) ** (-1.0 / distribution.shape)


def extreme_quantile(distribution: Distribution, n: int, p, largest: bool = True):
    """The p-quantile of the largest (or smallest) of `n` i.i.d. draws of `distribution`: exact."""
    p = np.asarray(p, dtype=np.float64)
    return quantile(distribution, p ** (1.0 / n) if largest else -np.expm1(np.log1p(-p) / n))


@lru_cache(maxsize=64)
def expected_max_normal(count: int) -> float:
    """E[max of `count` i.i.d. standard normals] (0 for one)."""
    if count <= 1:
        return 0.0
    value, _ = integrate.quad(lambda x: x * count * stats.norm.pdf(x) * stats.norm.cdf(x) ** (count - 1), -12, 12)
    return value


def processor_sharing(arrivals: np.ndarray, work: float) -> np.ndarray:
    """Completion times of jobs of `work` seconds each, arriving at sorted `arrivals`, on one resource
    shared equally by the jobs on it."""
    done, remaining, active = np.empty(len(arrivals)), np.empty(0), np.empty(0, dtype=np.int64)
    clock, position = float(arrivals[0]), 0
    while position < len(arrivals) or len(active):
        finish = clock + remaining.min() * len(active) if len(active) else math.inf
        arrive = arrivals[position] if position < len(arrivals) else math.inf
        if finish <= arrive:
            remaining, clock = remaining - (finish - clock) / len(active), finish
            over = remaining <= 1e-15
            done[active[over]] = clock
            remaining, active = remaining[~over], active[~over]
        else:
            if len(active):
                remaining = remaining - (arrive - clock) / len(active)
            clock = arrive
            remaining, active = np.append(remaining, work), np.append(active, position)
            position += 1
    return done


def queue_wait(shared, rank_factors: np.ndarray, workers: int) -> float:
    """Seconds a file waits at its server while every rank's workers chain their files: the M/G/1
    (Pollaczek–Khinchine) wait S·(1 + cv²)/2 · ρ/(1 − ρ) at the load ρ of every worker issuing a file
    per RPC + service + wait (a fixed point), spread over the servers."""
    service, scv = shared.service.mean, shared.service.scv()

    def excess(wait: float) -> float:
        load = workers * service * float(np.sum(1 / (shared.file_latency * rank_factors + service + wait))) / shared.servers
        return wait - (1e9 * service if load >= 1 else service * (1 + scv) / 2 * load / (1 - load))
    high = service
    while excess(high) < 0:
        high *= 2
    return optimize.brentq(excess, 0.0, high) if service and excess(0.0) < 0 else 0.0


def check_assumptions(platform: Platform, scenario: Scenario) -> None:
    """ValueError naming the knob where the engine's epoch does not reduce to per-node client factors."""
    check_scenario(platform, scenario)
    strategy = get_strategy(scenario.shuffle)
    if strategy.data_path == PATH_LOANS or (strategy.data_path == PATH_EXCHANGE and strategy.q_for(scenario.q) > 0):
        raise ValueError(f"shuffle={scenario.shuffle} moves samples between ranks: the fast path has GS and LS only")
    refusals = {
        "loader.prefetch": (platform.loader.prefetch != 0, "must be 0 (reads in the loop)"),
        "shared.background_load": (platform.shared.background_load != 0, "must be 0 (no other jobs' queue)"),
        "exchange.noise": (varies(platform.exchange.noise), "must draw nothing"),
        "machine_cores": (platform.machine_cores != 0, "must be 0 (each node its own cores)"),
        "accelerators_per_node": (platform.accelerators_per_node == 0,
                                  "must be > 0 (FW+BW and the loader's CPU must not contend)"),
        "scenario.scope": (scenario.scope != "rank", "must be rank"),
    }
    refuse(refusals, f"the order-statistics path (platform {platform.name})")
    shared = platform.shared
    if strategy.trains_from_shared:
        batch = scenario.batch_size
        chain = -(-batch // platform.loader.workers) * (
            shared.service.mean + shared.file_latency * float(quantile(shared.client_spread, 0.5)))
        busy = scenario.workers * batch * shared.service.mean / (
            shared.servers * (chain + batch * platform.loader.cpu_per_file / min(platform.loader.workers, batch)))
        if busy > MAX_UTILISATION:
            raise ValueError(f"shared.servers / shared.service.mean: this job keeps the servers {busy:.0%} busy "
                             f"(> {MAX_UTILISATION:.0%}); queueing is not light, simulate it")


def refuse(refusals: dict[str, tuple[bool, str]], path: str) -> None:
    """ValueError for the first knob of `refusals` ({knob: (refused, why)}) that `path` cannot model."""
    for knob, (refused, why) in refusals.items():
        if refused:
            raise ValueError(f"{knob} {why} for {path}; simulate it")


@dataclass(frozen=True)
class GlobalEpoch:
    """GS's epoch as a function of the nodes' client factors: a rank's I/O is `io(c)`, and the epoch
    waits for the slowest rank at every iteration (`slowest_extra`: its node's other ranks' and
    workers' chains, the slowest of which ends each iteration)."""

    base: float  # seconds of a rank's I/O that no factor scales (service, queue)
    per_factor: float  # seconds per unit of factor: file_latency over each batch's longest chain
    slowest_extra: float
    fwbw: float
    exposed: float
    grid: np.ndarray  # factors at the nodes' expected quantiles, increasing
    delays: np.ndarray  # seconds after the RPCs at each of `grid`: the shared capacities or decoding, the longer
    node_ranks: np.ndarray  # ranks on each node

    def io(self, factors):
        """A rank's I/O over the epoch on a node of client factor `factors` (an array)."""
        return self.base + self.per_factor * factors + np.interp(factors, self.grid, self.delays)

    def phases(self, factors: np.ndarray) -> dict[str, np.ndarray]:
        """Per row of `factors` (draws × nodes): a Result's io_s, io_min_s, io_max_s, allreduce_s, epoch_s."""
        io = self.io(factors)
        io_mean = (io @ self.node_ranks) / self.node_ranks.sum()
        epoch = io.max(axis=-1) + self.slowest_extra + self.fwbw + self.exposed
        return {"io_s": io_mean, "io_min_s": io.min(axis=-1), "io_max_s": io.max(axis=-1),
                "allreduce_s": epoch - self.fwbw - io_mean, "epoch_s": epoch}


def global_epoch(platform: Platform, scenario: Scenario) -> GlobalEpoch:
    """The GS epoch of `scenario` on `platform` as a function of its nodes' factors (check_assumptions first)."""
    loader, shared = platform.loader, platform.shared
    batches, node_ranks, fwbw, exposed = _shape(platform, scenario)
    nodes, per_node = len(node_ranks), platform.ranks_per_node
    sample_bytes = platform.dataset(scenario.dataset).sample_bytes
    grid = quantile(shared.client_spread, (np.arange(nodes) + 0.5) / nodes)  # the nodes at their expected quantiles
    rank_factors = np.repeat(grid, node_ranks)
    queued = queue_wait(shared, rank_factors, loader.workers)
    sigma = math.sqrt(shared.service.scv() * shared.service.mean ** 2 + queued ** 2)  # of one file's wait + service
    base = per_factor = slowest_extra = 0.0
    delays = np.zeros(nodes)
    for b, count in zip(*np.unique(batches, return_counts=True)):
        k, workers = -(-int(b) // loader.workers), min(loader.workers, int(b))
        cpu = b * (loader.cpu_per_file + shared.client_cpu_per_file) / workers
        chain = k * (shared.service.mean + queued) + math.sqrt(k) * sigma * expected_max_normal(workers)
        base += count * chain
        slowest_extra += count * math.sqrt(k) * sigma * (expected_max_normal(workers * per_node)
                                                         - expected_max_normal(workers))
        arrivals = chain + k * shared.file_latency * rank_factors
        done = np.maximum(processor_sharing(arrivals, b / shared.metadata_rate),
                          processor_sharing(arrivals, b * sample_bytes / shared.read_bandwidth))
        after_rpcs = np.maximum(done - arrivals, cpu)  # the workers decode while the bytes flow
        delays += count * np.add.reduceat(after_rpcs, np.cumsum(np.r_[0, node_ranks[:-1]])) / node_ranks
        per_factor += count * k * shared.file_latency
    return GlobalEpoch(base, per_factor, slowest_extra, fwbw, exposed, grid, delays, node_ranks)


def _shape(platform: Platform, scenario: Scenario):
    """Each iteration's batch, the ranks, each node's ranks, the epoch's FW+BW and exposed allreduce."""
    batches = iteration_batches(platform, scenario)
    ranks, per_node = scenario.workers, platform.ranks_per_node
    node_ranks = np.minimum(per_node, ranks - per_node * np.arange(platform.nodes_for(ranks)))
    fwbw = float((batches * platform.model(scenario.model).fwbw_per_sample).sum())
    return batches, node_ranks, fwbw, sum(exposed_allreduce(platform, scenario, batches).tolist())


def iteration_batches(platform: Platform, scenario: Scenario) -> np.ndarray:
    """Each iteration's batch (samples) of `scenario`'s epoch."""
    return np.array([stop - start for start, stop in scenario.spec(platform).steps_from(0)])


def exposed_allreduce(platform: Platform, scenario: Scenario, batches: np.ndarray) -> np.ndarray:
    """Per iteration, the allreduce's seconds that backward did not hide (`Allreduce.exposed`)."""
    model = platform.model(scenario.model)
    return np.array([platform.allreduce.exposed(scenario.workers, model.gradient_bytes,
                                                BACKWARD_SHARE * b * model.fwbw_per_sample) for b in batches.tolist()])


def local_io(platform: Platform, scenario: Scenario, batches: np.ndarray) -> np.ndarray:
    """Per iteration, LS's I/O: ⌈b/workers⌉ local file latencies, then the longer of the loader's CPU over
    its workers and the node's SSD shared by its ranks (the workers decode while the bytes flow)."""
    loader, sample_bytes = platform.loader, platform.dataset(scenario.dataset).sample_bytes
    return (-(-batches // loader.workers) * platform.local.file_latency
            + np.maximum(batches * loader.cpu_per_file / np.minimum(loader.workers, batches),
                         platform.ranks_per_node * batches * sample_bytes / platform.local.read_bandwidth))


def breakdown(platform: Platform, scenario: Scenario, draws: int = DRAWS) -> Breakdown:
    """The phase breakdown of `scenario` (GS or LS) on `platform` over seeds: median and p10/p90."""
    check_assumptions(platform, scenario)
    if not get_strategy(scenario.shuffle).trains_from_shared:
        batches, _, fwbw, exposed = _shape(platform, scenario)
        io = float(local_io(platform, scenario, batches).sum())
        return Breakdown(*(Spread(value, value, value) for value in (io, io, io, exposed, io + fwbw + exposed)),
                         fwbw)
    epoch = global_epoch(platform, scenario)
    spread, nodes = platform.shared.client_spread, len(epoch.node_ranks)
    io_min = epoch.io(extreme_quantile(spread, nodes, SPREAD_PROBABILITIES, largest=False))
    io_max = epoch.io(extreme_quantile(spread, nodes, SPREAD_PROBABILITIES))
    drawn = epoch.phases(quantile(spread, _uniforms(draws, nodes)))
    return Breakdown(Spread.of(drawn["io_s"]), Spread(*io_min), Spread(*io_max), Spread.of(drawn["allreduce_s"]),
                     Spread(*(io_max + epoch.slowest_extra + epoch.fwbw + epoch.exposed)), epoch.fwbw)


def at_seeds(platform: Platform, scenario: Scenario, seeds) -> list[dict[str, float]]:
    """GS's phases at each of `seeds` with the factors the engine draws there (SharedQueues'), for a
    seed-by-seed comparison with `simulate`."""
    check_assumptions(platform, scenario)
    epoch = global_epoch(platform, scenario)
    nodes = len(epoch.node_ranks)
    factors = np.array([SharedQueues(platform.shared, nodes, seed, scenario.epoch).client for seed in seeds])
    phases = epoch.phases(factors)
    return [{field: float(values[row]) for field, values in phases.items()} for row in range(len(factors))]


@lru_cache(maxsize=8)
def _uniforms(draws: int, nodes: int) -> np.ndarray:
    """`draws` × `nodes` uniforms from a fixed seed: the same at every parameter (common random numbers)."""
    return np.random.default_rng([nodes, 0x0D5]).random((draws, nodes))
