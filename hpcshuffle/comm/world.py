"""Who am I in the job: rank and world size from MPI, torch.distributed set up from them.

mpi4py's COMM_WORLD is the source of truth, so the same code runs under `mpiexec`, under
`srun --mpi=pmi2` and as a single process (an MPI singleton). Launches where that truth is
wrong — srun without PMI-2, torchrun, an mpiexec of another MPI — are recognised from their
environment and refused with the fix: each process would otherwise be a job of one, training alone.
"""

from __future__ import annotations

import hashlib
import os
import socket
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import TypeVar

from mpi4py import MPI

from hpcshuffle.errors import ConfigError

T = TypeVar("T")


@dataclass(frozen=True)
class World:
    """This process's place in the job (`discover`); `comm` carries only small metadata."""

    rank: int
    size: int
    local_rank: int  # rank among the processes on this node
    local_size: int
    node_ranks: tuple[int, ...]  # the global ranks on this node, by local rank
    hostname: str
    comm: MPI.Comm  # for small metadata only (pickle-based calls); payloads go through transport.py

    @property
    def is_root(self) -> bool:
        """True on rank 0, the rank that prints, writes the run's files and decides for all (`on_root`)."""
        return self.rank == 0


def launched_tasks(environ: Mapping[str, str]) -> tuple[str, int]:
    """(launcher, processes it started) from the environment: MPICH's mpiexec, srun, torchrun, or MPI's own.

    MPICH's mpiexec (hydra) starts one proxy per node, through `srun` inside a Slurm allocation,
    and the proxy starts the node's ranks: they inherit the proxies' srun step (as many tasks as
    nodes), so hydra's own variables are looked at first.
    """
    if "HYDI_CONTROL_FD" in environ:  # set by hydra's proxy in every rank it starts
        return "mpiexec", int(environ.get("PMI_SIZE", 0))
    if "SLURM_STEP_NUM_TASKS" in environ:  # inside an srun step (not just inside an sbatch job)
        return "srun", int(environ["SLURM_STEP_NUM_TASKS"])
    if "TORCHELASTIC_RUN_ID" in environ and "WORLD_SIZE" in environ:
        return "torchrun", int(environ["WORLD_SIZE"])
    return "mpi", 0  # another mpiexec / mpirun, or a single process: MPI knows


def check_launch(mpi_size: int, environ: Mapping[str, str]) -> None:
    """Fail with the fix when a launcher started several processes that MPI sees as separate jobs.

    Every rank would otherwise train alone on the whole dataset, silently. The signature is an
    MPI job smaller than what the launcher started (srun without PMI-2 makes each task a job of
    one). A larger MPI job under srun is a process manager that srun started once per node
    (mpiexec's proxies), each proxy starting that node's ranks: a sound launch.
    """
    launcher, tasks = launched_tasks(environ)
    if tasks <= 1 or mpi_size == tasks:
        return
    if launcher == "srun" and mpi_size > tasks:
        return
    if launcher == "srun":
        raise ConfigError(
            f"srun started {tasks} tasks but MPI sees a job of {mpi_size}: start them as one MPI job with "
            "`srun --mpi=pmi2 ...` (or export SLURM_MPI_TYPE=pmi2, or MpiDefault=pmi2 in slurm.conf)"
        )
    if launcher == "mpiexec":
        raise ConfigError(
            f"MPICH's mpiexec started {tasks} processes but MPI sees a job of {mpi_size}: mpi4py is built "
            "against another MPI than this mpiexec's; launch with the mpiexec installed beside this python "
            "(the `mpich` wheel's)"
        )
    raise ConfigError(
        f"torchrun started {tasks} processes but MPI sees a job of {mpi_size}: hpcshuffle's exchange and "
        f"staging need MPI ranks, which torchrun cannot provide; launch with `mpiexec -n {tasks}` or "
        f"`srun --mpi=pmi2 -n {tasks}` (torch.distributed is then set up from MPI)"
    )


def discover(environ: Mapping[str, str] = os.environ) -> World:
    """This process's place in the job; raises ConfigError when the launch cannot work."""
    comm = MPI.COMM_WORLD
    check_launch(comm.Get_size(), environ)
    node = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.Get_rank())
    world = World(
        rank=comm.Get_rank(),
        size=comm.Get_size(),
        local_rank=node.Get_rank(),
        local_size=node.Get_size(),
        node_ranks=tuple(node.allgather(comm.Get_rank())),
        hostname=socket.gethostname(),
        comm=comm,
    )
    node.Free()
    return world


def node_size(world: World, pretend: int | None = None) -> tuple[int, str]:
    """Collective: (R, "") when every node runs R consecutive ranks (node k: ranks kR .. kR+R-1, the
    block placement of mpiexec and `srun --distribution=block`), else (0, why not).

    `pretend` splits the machines into nodes of that many ranks (one machine seen as several nodes);
    a pretended node must lie inside one real node, whose ranks see one local disk.
    """
    nodes = sorted(set(world.comm.allgather(world.node_ranks)))
    size = pretend or world.local_size
    real = "; ".join(f"{len(ranks)} ranks ({ranks[0]}..{ranks[-1]})" for ranks in nodes[:4])
    if world.size % size:
        return 0, f"{world.size} ranks do not make nodes of {size}"
    inside = [set(ranks) for ranks in nodes]
    for start in range(0, world.size, size):
        if not any(set(range(start, start + size)) <= ranks for ranks in inside):
            return 0, (f"ranks {start}..{start + size - 1} are not on one node (nodes hold {real}"
                       f"{'; ...' if len(nodes) > 4 else ''})")
    return size, ""


def agree(world: World, problem: str | None) -> None:
    """Collective: raise the same ConfigError on every rank if any rank found a problem.

    Use it for checks whose outcome may differ between ranks (a path missing on one node), so
    that no rank walks into a collective the others have left.
    """
    problems = world.comm.allgather(problem)
    found = [(rank, text) for rank, text in enumerate(problems) if text]
    if found:
        rank, text = found[0]
        where = "" if len(found) == world.size else f" (on rank {rank}; {len(found)} of {world.size} ranks)"
        raise ConfigError(f"{text}{where}", collective=True)


def on_root(world: World, make: Callable[[], T], *errors: type[Exception]) -> T:
    """Collective: rank 0 computes `make()` and every rank gets the result, or the same error.

    `errors` are the exception types that mean bad input; anything else is a bug and propagates.
    """
    result, problem = None, None
    if world.is_root:
        try:
            result = make()
        except errors as err:
            problem = str(err)
    agree(world, problem)
    return world.comm.bcast(result, root=0)


def on_all(world: World, make: Callable[[], T], *errors: type[Exception]) -> T:
    """Collective: every rank computes `make()`; if it fails with one of `errors` on any rank, all raise."""
    result, problem = None, None
    try:
        result = make()
    except errors as err:
        problem = str(err)
    agree(world, problem)
    return result


def check_same(world: World, what: str, value: str) -> None:
    """Collective: fail on every rank unless all ranks pass the same `value` (e.g. a config hash)."""
    values = world.comm.allgather(value)
    if len(set(values)) > 1:
        groups: dict[str, list[int]] = {}
        for rank, seen in enumerate(values):
            groups.setdefault(seen, []).append(rank)
        listing = "; ".join(f"ranks {ranks}: {seen}" for seen, ranks in groups.items())
        raise ConfigError(
            f"ranks disagree on {what} ({listing}); launch every rank with the same "
            "overrides and seed",
            collective=True,
        )


def config_digest(text: str) -> str:
    """16 hex digits (blake2b) of `text`: a config's fingerprint that ranks compare and stores record."""
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def init_torch_distributed(world: World, backend: str, timeout_s: float) -> None:
    """Start torch.distributed with rank/size from MPI and a fresh TCP rendezvous.

    Rank 0 picks a free port and broadcasts it with its address: no fixed port, no init file.
    A collective that waits `timeout_s` on a silent peer raises (gloo; NCCL through its watchdog).
    """
    import torch.distributed as dist

    if world.is_root:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind(("", 0))
            port = probe.getsockname()[1]
        address = world.hostname
    else:
        port, address = None, None
    port, address = world.comm.bcast((port, address), root=0)
    single_node = len(set(world.comm.allgather(world.hostname))) == 1
    if single_node:
        address = "127.0.0.1"
    dist.init_process_group(
        backend=backend,
        init_method=f"tcp://{address}:{port}",
        rank=world.rank,
        world_size=world.size,
        timeout=timedelta(seconds=timeout_s),
    )


def leave_at_once() -> None:
    """End this process now that its run has finished cleanly: MPI finalized, output flushed, and
    no interpreter teardown.

    Unloading the ~2,500 modules a run imports (torch, torchvision, Hydra) costs each rank about a
    second of CPU: 2 s of every 4-rank job on 2 cores, for nothing. Everything a run writes is
    closed by then (metrics, checkpoints, stores, wandb). A thread still running other than as a
    daemon means something was left open: then the process ends the ordinary way, waiting for it
    as Python would.
    """
    if any(thread.is_alive() and not thread.daemon for thread in threading.enumerate()
           if thread is not threading.main_thread()):
        return
    sys.stdout.flush()
    sys.stderr.flush()
    if MPI.Is_initialized() and not MPI.Is_finalized():
        MPI.Finalize()
    os._exit(0)
