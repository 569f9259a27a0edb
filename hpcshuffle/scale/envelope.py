"""The back-of-envelope beside every simulated epoch: what the platform's own numbers give with no
simulation, no queue and no random draw, so a user sees where the model adds something and where it
only repeats arithmetic (docs/scale.md, "The envelope").

A rank trains n = ⌈N/M⌉ samples an epoch in ⌈n/b⌉ iterations, with c cores of its own: the node's
cores over its ranks, or the machine's over all ranks for namespace nodes.

- fwbw = n · fwbw_per_sample, ÷ c where c < 1 and FW+BW runs on the CPU (no accelerator);
- allreduce = iterations · (2(M−1)·α + 2(M−1)/M · gradient_bytes / bandwidth), the ring, unhidden;
- decode = n · cpu_per_file ÷ min(loader.workers, c): the loader's processes decode side by side on
  the rank's cores;
- io from the node-local store (LS, PLS, locality): n · (file_latency + sample_bytes / read_bandwidth)
  / loader.workers + decode;
- io from shared storage (GS): the largest of what the storage allows the whole job, N · sample_bytes
  / read_bandwidth, N / metadata_rate and N · service / servers, and one rank's own per-file wait,
  n · (file_latency + client_cpu_per_file) / loader.workers; plus decode;
- exchange (PLS): the q · n samples a rank sends and the as many it receives, over its node's link:
  2 · q · n · sample_bytes · ranks_per_node / link_bandwidth;
- epoch = max(io, exchange, fwbw) + allreduce: reading and moving hide behind FW+BW, or FW+BW behind
  them, whichever is longer; the allreduce waits for both.
"""

from __future__ import annotations

from hpcshuffle.plan import get_strategy
from hpcshuffle.scale.platform import Platform
from hpcshuffle.scale.scenario import Scenario


def cores_per_rank(platform: Platform, workers: int) -> float:
    """The CPU cores one rank of `workers` has to itself (below 1 where ranks share a core)."""
    if platform.machine_cores:
        return platform.machine_cores / workers
    return platform.cpu_cores_per_node / min(workers, platform.ranks_per_node)


def envelope(platform: Platform, scenario: Scenario) -> dict:
    """The envelope's epoch of `scenario` on `platform` (module doc): {"epoch_s", "io_s", "exchange_s",
    "fwbw_s", "allreduce_s", "bound"}, seconds per epoch of one rank; `bound` names the phase that
    sets the epoch besides the allreduce."""
    spec = scenario.spec(platform)
    model, dataset = platform.model(scenario.model), platform.dataset(scenario.dataset)
    workers, samples, per_rank, iterations = spec.num_ranks, spec.num_samples, spec.max_share, spec.iterations
    cores = cores_per_rank(platform, workers)
    loader, shared, local = platform.loader, platform.shared, platform.local
    fwbw = per_rank * model.fwbw_per_sample / (min(1.0, cores) if platform.accelerators_per_node == 0 else 1.0)
    ring = 2 * (workers - 1)
    allreduce = iterations * (ring * platform.allreduce.alpha
                              + ring / workers * model.gradient_bytes / platform.allreduce.bandwidth) if workers > 1 else 0.0
    decode = per_rank * loader.cpu_per_file / min(loader.workers, cores)
    strategy = get_strategy(scenario.shuffle)
    if not strategy.node_scope:  # no partition in node-local stores: every sample from shared storage
        job = max(samples * dataset.sample_bytes / shared.read_bandwidth, samples / shared.metadata_rate,
                  samples * shared.service.mean / shared.servers)
        own = per_rank * (shared.file_latency + shared.client_cpu_per_file) / loader.workers
        io = max(job, own) + decode
    else:
        io = per_rank * (local.file_latency + dataset.sample_bytes / local.read_bandwidth) / loader.workers + decode
    moved = spec.q if strategy.fixed_q is None else 0.0  # only a strategy whose q is the user's exchanges
    exchange = 2 * moved * per_rank * dataset.sample_bytes * platform.ranks_per_node / platform.network.link_bandwidth
    phases = {"io": io, "exchange": exchange, "fwbw": fwbw}
    bound = max(phases, key=phases.get)
    return {"epoch_s": phases[bound] + allreduce, **{f"{name}_s": value for name, value in phases.items()},
            "allreduce_s": allreduce, "bound": bound, "iterations": iterations}
