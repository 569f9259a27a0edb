"""Shared storage as queues: how long one rank's batch of files takes on the parallel file system.

A file read from shared storage (the platform's `shared:` knobs, conf/platform/abci.yaml) costs

    client_spread[node] · file_latency        the client's RPC round trips, outside any queue
  + background wait                            behind other jobs' requests (M/G/1 at background_load)
  + wait at its server                         behind this job's own requests, first come first served
  + service                                    the read itself (seek, rotation, transfer): a draw

Each file goes to one of `servers` independent FIFO queues, chosen at random. The job's own
requests queue behind each other there: the more ranks read at once, the longer the mean and the
wider the spread — queueing, not a fixed latency. A batch's files are dealt to the loader's
`workers`; each worker chains its files, and the batch is read when the last worker is done.

Two simplifications:
- A batch books its files' server time when it starts: each file takes the first idle stretch of
  its server, at or after it arrives, long enough for its service (SimGrid runs the ranks in
  simulated-time order, so every request that arrived earlier is booked by then; a worker's later
  files of that batch are booked before other ranks' requests that arrive meanwhile, which may then
  fill the gaps before them).
- Other jobs' requests are not simulated one by one: a file waits behind them with probability
  background_load, for an exponential time whose mean is the M/G/1 (Pollaczek–Khinchine) wait of
  those that wait, S·(1 + cv²) / (2·(1 − ρ)).

`client_spread` is drawn once per node per epoch: a node whose client is slow stays slow for the
epoch, so the same ranks arrive late at the allreduce iteration after iteration, as Nguyen et al.
measured (Sec. V-F: fastest rank 11.9 s of I/O, slowest 142 s).
"""

from __future__ import annotations

import numpy as np

from hpcshuffle.scale.platform import SharedStorage


class SharedQueues:
    """The servers' queues of one simulated epoch, and every node's client factor."""

    def __init__(self, shared: SharedStorage, nodes: int, seed: int, epoch: int) -> None:
        self.shared = shared
        self.rng = np.random.default_rng([seed, epoch, 0x5EED])
        self.booked: list[list[tuple[float, float]]] = [[] for _ in range(shared.servers)]  # per server: (start, end), sorted
        self.client = shared.client_spread.sample(self.rng, nodes)
        load, service = shared.background_load, shared.service
        self.background_wait = service.mean * (1 + service.scv()) / (2 * (1 - load)) if load else 0.0

    def read(self, now: float, node: int, files: int, workers: int) -> float:
        """Seconds from `now` until `files` files are read by a client on `node`, `workers` in flight."""
        if files == 0:
            return 0.0
        shared, rng = self.shared, self.rng
        servers = rng.integers(0, shared.servers, files).tolist()
        service = shared.service.sample(rng, files).tolist()
        behind = np.where(rng.random(files) < shared.background_load,
                          rng.exponential(self.background_wait or 1.0, files), 0.0).tolist()
        rpc = shared.file_latency * float(self.client[node])
        ready = [now] * min(workers, files)  # when each worker can start its next file
        for index in range(files):
            worker = index % len(ready)
            ready[worker] = self._book(servers[index], ready[worker] + rpc + behind[index], service[index], now)
        return max(ready) - now

    def _book(self, server: int, arrival: float, service: float, now: float) -> float:
        """Book `service` seconds on `server` in its first idle stretch from `arrival`; when it ends."""
        booked = self.booked[server]
        while booked and booked[0][1] <= now:  # no request arrives before `now` any more
            booked.pop(0)
        start, slot = arrival, len(booked)
        for position, (busy_from, busy_to) in enumerate(booked):
            if start + service <= busy_from:
                slot = position
                break
            start = max(start, busy_to)
        booked.insert(slot, (start, start + service))
        return start + service
