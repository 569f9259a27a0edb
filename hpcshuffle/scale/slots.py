"""The PLS authors' exchange scheduler, as the engine charges it (`exchange.scheduler: kakurenbo`).

Read from their public code (github.com/TruongThaoNguyen/kakurenbo, commit 15eb317,
ImageNet/utils/scheduler.py, class PartialScheduler; the model is ours):

- Per epoch every rank exchanges the first ⌈q·N/M⌉ samples of a permutation of its partition,
  about q·b an iteration.
- Each exchanged sample is a *slot*: a blocking barrier of every rank; then every rank sends one
  sample to its image under a permutation of the ranks that all ranks draw alike (a rank mapped to
  itself keeps its sample), read and decoded on the training thread and pickled as pixels into one
  message, received into a fixed 4 MiB buffer.
- The next iteration waits for the slots' messages, re-encodes and writes each received sample,
  and ends with one more barrier.

So a rank pays, per iteration: q·b slots of `exchange.slot_cpu` (its own draw of `exchange.noise`
added), each slot's barrier waiting for the slowest rank and costing ⌈log₂ M⌉ network latencies
(`allreduce.alpha`, a dissemination barrier), then the wait for its messages and one barrier.
Nothing of it overlaps FW+BW but the bytes on the wire.
"""

from __future__ import annotations

import math

import numpy as np


class SlotExchange:
    """The slots of one simulated epoch, shared by every rank's actor (all do the same slots)."""

    def __init__(self, simulation, seed: int, epoch: int) -> None:
        self.simulation = simulation
        spec, platform = simulation.traffic.spec, simulation.platform
        ranks, iterations = spec.num_ranks, simulation.traffic.iterations
        per_rank = math.ceil(spec.q * spec.num_samples / ranks) if ranks > 1 else 0
        base, extra = divmod(per_rank, iterations)
        slots = [base + (iteration < extra) for iteration in range(iterations)]  # the same on every rank
        rng = np.random.default_rng([seed, epoch, 0x51075])
        self.peers = [rng.permutation(ranks) for _ in range(per_rank)]  # slot -> the rank each rank sends to
        self.first = np.concatenate([[0], np.cumsum(slots)]).tolist()  # the iteration's first slot
        self.barrier_s = math.ceil(math.log2(ranks)) * platform.allreduce.alpha if ranks > 1 else 0.0
        self.bytes = int(platform.exchange.slot_bytes or simulation.sample_bytes)
        self.pending: dict[int, list] = {}  # rank -> its messages still on the wire

    def iterate(self, rank: int, iteration: int) -> None:
        """The rank's exchange phase of `iteration`: land the last iteration's slots, then run this one's."""
        self.land(rank)
        sim = self.simulation
        node, on_cpu = rank // sim.platform.ranks_per_node, not sim.platform.accelerators_per_node
        posted = []
        for slot in range(self.first[iteration], self.first[iteration + 1]):
            sim._cpu(sim.platform.exchange.slot_cpu + sim.noise(), on_cpu)
            self._barrier()
            peer = int(self.peers[slot][rank])
            if peer != rank:
                peer_node = peer // sim.platform.ranks_per_node
                posted.append(sim.sg.Comm.sendto_async(sim.node_hosts[node], sim.node_hosts[peer_node], self.bytes))
        if self.first[iteration + 1] > self.first[iteration]:  # synchronize follows every iteration with slots
            self.pending[rank] = posted

    def land(self, rank: int) -> None:
        """Wait for the rank's messages of the last iteration's slots, then the synchronising barrier."""
        posted = self.pending.pop(rank, None)
        if posted is None:
            return
        for comm in posted:
            comm.wait()
        self._barrier()

    def _barrier(self) -> None:
        self.simulation.barrier.wait()
        self.simulation.sg.this_actor.sleep_for(self.barrier_s)
