"""One simulated epoch on SimGrid: one actor per rank (and one per rank's data loader).

What the model charges, per rank and iteration (every knob is documented in scale/platform.py):

- **I/O** — reading the batch, `loader.workers` files in flight: from the node's SSD,
  ⌈files / workers⌉ per-file latencies and the bytes from the node's disk (shared by the node's
  ranks); from shared storage, the servers' queues of scale/storage.py (each file its RPCs, its
  wait and its service time, drawn, so ranks drift apart), one open on the metadata service and
  the bytes from the servers' aggregate bandwidth, capacities every reader shares. While the bytes
  flow, `loader.cpu_per_file` (and a FUSE client's `shared.client_cpu_per_file`) of CPU time per file
  on the node's cores, spread over the workers, decodes them: a batch costs its RPCs, then the longer
  of its decoding and its bytes. With `loader.prefetch` > 0
  a loader actor on the node's CPU reads that many batches ahead, so only the wait for the batch
  counts, as in the real loop; with 0 the rank reads in the loop.
- **Exchange** (PLS) — the plan's moves of that iteration, one message per destination through
  the fat tree (`Comm.sendto_async`), read from the sender's SSD first; the training thread pays
  `exchange.cpu_per_sample` per sample and waits, one iteration later, for what it posted (a bound:
  hpcshuffle's exchange threads make it wait only at the epoch's end, and a few samples' bytes are
  microseconds on the wire); received samples are written to the receiver's SSD, and the epoch ends with
  `exchange.epoch_overhead` (commit, fsync, cleanup). With `exchange.scheduler: kakurenbo`, the
  PLS authors' scheduler instead: a barrier and a message per exchanged sample (scale/slots.py).
  **Loans** (locality):
  the borrower waits for the lender's samples (SSD read + transfer) before its step.
- **FW+BW** — `batch × fwbw_per_sample` on one of the node's accelerators (or, with none, its CPU
  cores), plus the rank's draw of `exchange.noise`; more ranks than accelerators share them.
- **Allreduce** — every rank waits for the slowest (a barrier: synchronous SGD), then what of an
  α–β ring model its buckets did not hide behind backward (`Allreduce.exposed`; on a platform
  without accelerators, CPU time on the node's cores, as gloo's is). A
  simulated ring would put 2(M−1) messages per rank on the network every iteration, O(M²)
  events an epoch; the α–β model is what NCCL's own tuner uses, and it is calibrated.
- **Epoch end** — each rank drains its last exchange messages and disk writes, then a barrier.

SimGrid's engine can run once per process, so `simulate` runs each epoch in a forked child; what it
is asked and what it answers (`Scenario`, `Result`) are scale/scenario.py's.
"""

from __future__ import annotations

import multiprocessing
import os
import time

import numpy as np

from hpcshuffle.scale.platform import BACKWARD_SHARE, Platform
from hpcshuffle.scale.scenario import PHASES, Result, Scenario, check_scenario
from hpcshuffle.scale.slots import SlotExchange
from hpcshuffle.scale.storage import SharedQueues
from hpcshuffle.scale.traffic import EpochTraffic, epoch_traffic


def simulate(platform: Platform, scenario: Scenario) -> Result:
    """Simulate one epoch in a forked child (SimGrid's engine runs once per process)."""
    check_scenario(platform, scenario)
    context = multiprocessing.get_context("fork")  # the parent never imports SimGrid
    receive, send = context.Pipe(duplex=False)
    child = context.Process(target=_child, args=(send, platform, scenario), daemon=True)
    child.start()
    send.close()
    try:
        outcome = receive.recv()
    except EOFError:
        child.join()
        raise RuntimeError(f"the simulation of {scenario} died (exit code {child.exitcode})") from None
    child.join()
    if isinstance(outcome, BaseException):
        raise outcome
    return outcome


def _child(send, platform: Platform, scenario: Scenario) -> None:
    try:
        outcome = _simulate_here(platform, scenario)
    except BaseException as err:  # handed to the parent, which raises it
        outcome = err
    send.send(outcome)
    send.close()
    os._exit(0)  # skip interpreter teardown: SimGrid's actor threads are gone with the process


def _simulate_here(platform: Platform, scenario: Scenario) -> Result:
    from hpcshuffle.scale.sg import load_simgrid

    started = time.perf_counter()
    traffic = epoch_traffic(scenario.spec(platform), scenario.shuffle, scenario.epoch)
    totals = EpochSimulation(load_simgrid(), platform, scenario, traffic).run()
    ranks = scenario.workers
    return Result(
        workers=ranks, shuffle=scenario.shuffle, q=traffic.spec.q,
        epoch_s=max(totals["epoch"]), iterations=traffic.iterations,
        wall_s=time.perf_counter() - started, scope=scenario.scope,
        io_min_s=min(totals["io"]), io_max_s=max(totals["io"]),
        **{f"{phase}_s": sum(totals[phase]) / ranks for phase in PHASES},
    )


class EpochSimulation:
    """The SimGrid platform and actors of one epoch; `run()` returns per-rank seconds per phase."""

    def __init__(self, sg, platform: Platform, scenario: Scenario, traffic: EpochTraffic) -> None:
        self.sg, self.platform, self.traffic = sg, platform, traffic
        self.ranks = scenario.workers
        self.model = platform.model(scenario.model)
        self.sample_bytes = platform.dataset(scenario.dataset).sample_bytes
        self.engine = sg.Engine(["hpcshuffle-scale", "--log=root.thres:critical",
                                 "--cfg=network/model:LV08"])
        self.node_hosts, self.node_disks = self._build_cluster()
        self.queues = SharedQueues(platform.shared, len(self.node_hosts), scenario.seed, scenario.epoch)
        self.exposed: dict[int, float] = {}  # batch size -> the allreduce's seconds after backward
        self.noise_rng = np.random.default_rng([scenario.seed, scenario.epoch, 0x401])
        kakurenbo = platform.exchange.scheduler == "kakurenbo" and traffic.sends.total() > 0
        self.slot_exchange = SlotExchange(self, scenario.seed, scenario.epoch) if kakurenbo else None
        self.barrier = sg.Barrier(self.ranks)
        self.totals = {phase: [0.0] * self.ranks for phase in (*PHASES, "epoch")}

    # ---- platform ---------------------------------------------------------------------------
    def _build_cluster(self):
        sg, platform = self.sg, self.platform
        network, used_nodes = platform.network, platform.nodes_for(self.ranks)
        root = sg.NetZone.create_full_zone("root")
        hosts, disks = {}, {}

        # every host computes in core-seconds (speed 1): a node's CPU cores, and its accelerators
        # (in a zone of their own: they compute, the node's host communicates)
        def add_node(zone, coords, node_id):
            host = zone.create_host(f"node-{node_id}", 1.0)
            host.core_count = platform.cpu_cores_per_node
            disks[node_id] = host.create_disk(f"ssd-{node_id}", platform.local.read_bandwidth,
                                              platform.local.write_bandwidth)
            host.seal()
            hosts[node_id] = host
            return host.netpoint, None

        def loopback(zone, coords, node_id):
            link = zone.create_link(f"intra-{node_id}", network.intra_node_bandwidth)
            link.set_latency(network.intra_node_latency)
            link.seal()
            return link

        if network.topology == "fat_tree":
            levels, down, up, counts = network.fat_tree.split(";")
            params = sg.FatTreeParams(int(levels), *([int(c) for c in part.split(",")] for part in (down, up, counts)))
            fabric = sg.NetZone.create_fatTree_zone(
                "fabric", root, params, sg.ClusterCallbacks(add_node, loopback, None),
                network.link_bandwidth, network.link_latency, sg.Link.SharingPolicy.SPLITDUPLEX)
        else:
            fabric = self._build_star(root, used_nodes, add_node, loopback)
        fabric.seal()
        # where the nodes' CPU work runs: each node's own cores, or one machine's that every node
        # shares (the nodes are namespaces of that machine: platform.machine_cores)
        self.cpu_hosts = [hosts[node] for node in range(used_nodes)]
        if platform.machine_cores:
            machines = sg.NetZone.create_full_zone("machine")
            machines.set_parent(root)
            machine = machines.create_host("machine", 1.0)
            machine.core_count = platform.machine_cores
            self.cpu_hosts = [machine.seal()] * used_nodes
            machines.seal()
        self.compute_hosts = list(self.cpu_hosts)
        if platform.accelerators_per_node:
            devices = sg.NetZone.create_full_zone("accelerators")
            devices.set_parent(root)
            self.compute_hosts = []
            for node in range(used_nodes):
                device = devices.create_host(f"accelerators-{node}", 1.0)
                device.core_count = platform.accelerators_per_node
                self.compute_hosts.append(device.seal())
            devices.seal()
        # the shared file system's capacities, every reader sharing each: the metadata service's
        # opens/s and the servers' bandwidth (their queues are scale/storage.py's). Each is a
        # SimGrid disk whose "bytes" are files for the first (a remote Exec stalls in 3.32).
        storage = sg.NetZone.create_full_zone("storage")
        storage.set_parent(root)
        shared = platform.shared
        servers = storage.create_host("servers", 1.0)
        self.shared_disks = (
            (servers.create_disk("opens", shared.metadata_rate, shared.metadata_rate), 1.0),
            (servers.create_disk("bandwidth", shared.read_bandwidth, shared.read_bandwidth), self.sample_bytes),
        )
        servers.seal()
        storage.seal()
        root.seal()
        return [hosts[node] for node in range(used_nodes)], [disks[node] for node in range(used_nodes)]

    def _build_star(self, root, nodes, add_node, loopback):
        sg, network = self.sg, self.platform.network
        star = sg.NetZone.create_star_zone("fabric")
        star.set_parent(root)
        for node in range(nodes):
            netpoint, _ = add_node(star, [node], node)
            up = star.create_split_duplex_link(f"port-{node}", network.link_bandwidth)
            up.set_latency(network.link_latency).seal()
            star.add_route(netpoint, None, None, None,
                           [sg.LinkInRoute(up, sg.LinkInRoute.Direction.UP)], True)
            loop = loopback(star, [node], node)
            star.add_route(netpoint, netpoint, None, None, [sg.LinkInRoute(loop)], False)
        return star

    def run(self) -> dict[str, list[float]]:
        """Simulate the epoch: per phase (and "epoch"), each rank's seconds. Re-raises an actor's error;
        RuntimeError when some rank never finishes (a deadlock, e.g. a bandwidth or rate of 0)."""
        sg = self.sg
        self.failure: Exception | None = None
        self.finished = 0
        for rank in range(self.ranks):
            node = rank // self.platform.ranks_per_node
            ready, slots = sg.Semaphore(0), sg.Semaphore(self.platform.loader.prefetch)
            # the rank runs where it computes; its loader on the node's CPU
            sg.Actor.create(f"rank-{rank}", self.compute_hosts[node], self._guarded(self._rank), rank, ready, slots)
            if self.platform.loader.prefetch > 0:
                sg.Actor.create(f"loader-{rank}", self.cpu_hosts[node], self._guarded(self._loader),
                                rank, ready, slots)
        self.engine.run()
        if self.failure is not None:
            raise self.failure
        if self.finished != self.ranks:
            raise RuntimeError(
                f"the simulation deadlocked: {self.ranks - self.finished} of {self.ranks} ranks never finished "
                "the epoch (a platform bandwidth or rate of 0?)")
        return self.totals

    def _guarded(self, body):
        """`body` as an actor whose Python error is kept for `run` to raise (SimGrid would abort the process)."""
        def actor(*args) -> None:
            try:
                body(*args)
            except self.sg.ActorKilled:  # SimGrid ending a deadlocked run unwinds its actors
                raise
            except Exception as err:  # the others then block and SimGrid ends the run as a deadlock
                self.failure = self.failure or err
        return actor

    # ---- actors -----------------------------------------------------------------------------
    def _read(self, rank: int, local: int, shared: int, on_cpu: bool) -> None:
        """Read `local` files from the node's SSD and `shared` from shared storage (blocking).

        `on_cpu`: the calling actor runs on the node's CPU host, where the read's CPU time contends.
        """
        sg, platform, workers = self.sg, self.platform, self.platform.loader.workers
        files = local + shared
        if files == 0:
            return
        node = rank // platform.ranks_per_node
        waited = self.queues.read(sg.Engine.clock, node, shared, workers)  # booked from now: the queues' clock
        waited += -(-local // workers) * platform.local.file_latency
        sg.this_actor.sleep_for(waited)
        # the bytes flow while the workers decode what has arrived: RPCs, then max(decode, bytes)
        activities = []
        if local:
            activities.append(self.node_disks[node].read_async(int(local * self.sample_bytes)))
        if shared:
            activities += [disk.read_async(int(shared * unit)) for disk, unit in self.shared_disks]
        self._cpu(files * platform.loader.cpu_per_file + shared * platform.shared.client_cpu_per_file, on_cpu,
                  threads=min(workers, files))
        for activity in activities:
            activity.wait()

    def _cpu(self, seconds: float, on_cpu: bool, threads: int = 1) -> None:
        """Spend `seconds` of CPU time on `threads` cores at once: contended on the node's cores where
        the actor runs there; an actor on an accelerator just waits (SimGrid 3.32's Python bindings
        stall on an Exec placed on another host, and its 10 cores per GPU are rarely the bottleneck)."""
        if not on_cpu:
            self.sg.this_actor.sleep_for(seconds / threads)
        elif threads == 1:
            self.sg.this_actor.execute(seconds)
        else:
            for execution in [self.sg.this_actor.exec_async(seconds / threads) for _ in range(threads)]:
                execution.wait()

    def _loader(self, rank: int, ready, slots) -> None:
        """Read batches ahead of the training loop, at most `loader.prefetch` of them."""
        for iteration in range(self.traffic.iterations):
            slots.acquire()
            self._read(rank, int(self.traffic.local_reads[rank, iteration]),
                       int(self.traffic.shared_reads[rank, iteration]), on_cpu=True)
            ready.release()

    def _rank(self, rank: int, ready, slots) -> None:
        sg, traffic, platform = self.sg, self.traffic, self.platform

        def clock() -> float:
            return sg.Engine.clock  # a static property: the simulated time now
        node = rank // platform.ranks_per_node
        sends, loans = traffic.sends.of(rank), traffic.loans.of(rank)
        totals = {phase: 0.0 for phase in PHASES}
        posted: list = []  # exchange messages of the previous iteration, and where they land
        writes: list = []
        prefetching = platform.loader.prefetch > 0
        started = clock()
        for iteration in range(traffic.iterations):
            mark = clock()
            if prefetching:
                ready.acquire()
                slots.release()
            else:
                self._read(rank, int(traffic.local_reads[rank, iteration]), int(traffic.shared_reads[rank, iteration]),
                           on_cpu=not platform.accelerators_per_node)
            totals["io"] += clock() - mark

            mark = clock()
            if self.slot_exchange:
                self.slot_exchange.iterate(rank, iteration)
            else:
                writes += self._land(posted)
                posted = self._post(node, sends.get(iteration, ()))
            self._borrow(node, loans.get(iteration, ()))
            totals["exchange"] += clock() - mark

            mark = clock()
            start, stop = traffic.spec.batch_bounds(iteration)
            sg.this_actor.execute((stop - start) * self.model.fwbw_per_sample + self.noise())
            totals["fwbw"] += clock() - mark

            mark = clock()
            self.barrier.wait()
            # without accelerators the allreduce (gloo) is the CPU's work too, and contends
            self._cpu(self._exposed(stop - start), on_cpu=not platform.accelerators_per_node)
            totals["allreduce"] += clock() - mark

        mark = clock()
        writes += self._land(posted)
        for write in writes:
            write.wait()
        if self.slot_exchange:
            self.slot_exchange.land(rank)
        elif sends:  # the epoch's commit: paid once, however few iterations there were to hide the moves
            self._cpu(platform.exchange.epoch_overhead, on_cpu=not platform.accelerators_per_node)
        totals["exchange"] += clock() - mark
        mark = clock()
        self.barrier.wait()
        totals["allreduce"] += clock() - mark
        for phase, seconds in totals.items():
            self.totals[phase][rank] = seconds
        self.totals["epoch"][rank] = clock() - started
        self.finished += 1

    def noise(self) -> float:
        """One draw of the training thread's jitter (`exchange.noise`), 0 when there is none."""
        noise = self.platform.exchange.noise
        return float(noise.sample(self.noise_rng, 1)[0]) if noise.mean else 0.0

    def _exposed(self, batch: int) -> float:
        """The allreduce's seconds after a backward of `batch` samples (buckets overlap the rest)."""
        if batch not in self.exposed:
            backward_s = BACKWARD_SHARE * batch * self.model.fwbw_per_sample
            self.exposed[batch] = self.platform.allreduce.exposed(self.ranks, self.model.gradient_bytes, backward_s)
        return self.exposed[batch]

    def _post(self, node: int, messages) -> list:
        """Read this iteration's outgoing samples, frame them, and start one message per destination."""
        if not messages:
            return []
        sg, platform = self.sg, self.platform
        samples = sum(count for _, count in messages)
        self.node_disks[node].read(int(samples * self.sample_bytes))
        self._cpu(samples * platform.exchange.cpu_per_sample, on_cpu=not platform.accelerators_per_node)
        posted = []
        for peer, count in messages:
            peer_node = peer // platform.ranks_per_node
            comm = sg.Comm.sendto_async(self.node_hosts[node], self.node_hosts[peer_node], int(count * self.sample_bytes))
            posted.append((comm, peer_node, count))
        return posted

    def _land(self, posted) -> list:
        """Wait for the previous iteration's messages; their samples are written at the receivers."""
        writes = []
        for comm, peer_node, count in posted:
            comm.wait()
            writes.append(self.node_disks[peer_node].write_async(int(count * self.sample_bytes)))
        return writes

    def _borrow(self, node: int, loans) -> None:
        """Fetch this step's borrowed samples from the lenders' SSDs before training on them."""
        activities = []
        for lender, count in loans:
            lender_node = lender // self.platform.ranks_per_node
            size = int(count * self.sample_bytes)
            activities.append(self.node_disks[lender_node].read_async(size))
            activities.append(self.sg.Comm.sendto_async(self.node_hosts[lender_node], self.node_hosts[node], size))
        for activity in activities:
            activity.wait()
