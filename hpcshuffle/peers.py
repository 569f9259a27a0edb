"""Who stopped answering: a torch.distributed collective's failure turned into a named `PeerLost`.

A gloo collective that waits world.timeout_s on a frozen rank ("Timed out waiting 8000ms for recv
operation to complete"), or loses the connection to a dead one ("Connection reset by peer"), says
neither which rank nor which node. `Peers.waiting_in` catches that failure, and the surviving
ranks hold a roll call over MPI: each posts what it was waiting in to every other rank and
collects theirs for a short grace period, never blocking (a peer may be stopped or dead, and a
blocking call would wait on it forever). The ranks never heard from are the lost ones, named with
their nodes; a peer address in gloo's text is named with its node too, from the addresses every
rank gave at start-up.
"""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
from mpi4py import MPI

from hpcshuffle.errors import PeerLost
from hpcshuffle.world import World

GRACE_S = 10.0  # the roll call's length at most; ranks that time out on the same collective do so within it
POLL_S = 0.01
NOTE_BYTES = 200  # what a rank says in the roll call: what it was waiting in, utf-8, cut to this
# how torch.distributed's backends word a peer that does not answer, lowercased
SILENT_PEER = (
    "timed out", "connection closed", "connection reset", "broken pipe", "connection refused",
    "communicator was aborted", "collective operation timeout",
)
ADDRESS = re.compile(r"\[([0-9A-Fa-f:.]+)\]:(\d+)")  # gloo names a pair's peer as [ip]:port
SOURCE_PREFIX = re.compile(r"^\[[^\]]*\.(?:cc|cpp|h):\d+\]\s*")  # "[.../unbound_buffer.cc:78] "
_LEFT_POSTED: list = []  # the roll call's buffers and requests, alive until the job ends


def silent_peer(error: BaseException) -> bool:
    """Whether a collective's error means a peer stopped answering (rather than a bug)."""
    text = str(error).lower()
    return any(phrase in text for phrase in SILENT_PEER)


def host_addresses(hostname: str) -> list[str]:
    """The IP addresses `hostname` resolves to (those gloo binds to unless told otherwise)."""
    try:
        return sorted({info[4][0] for info in socket.getaddrinfo(hostname, None)})
    except OSError:
        return []


def roll_call(comm: MPI.Comm, tag: int, note: str, grace_s: float) -> dict[int, str]:
    """Post `note` to every other rank and collect theirs for at most `grace_s` seconds.

    Non-blocking throughout: the sends and the receives of ranks not heard from stay posted
    (the job is about to end); nothing waits on a rank that may be stopped or dead.

    Returns:
        {rank: its note} for this rank and every rank heard from within `grace_s`.
    """
    rank, size = comm.Get_rank(), comm.Get_size()
    heard = {rank: note}
    mine = np.zeros(NOTE_BYTES, dtype=np.uint8)
    encoded = note.encode()[:NOTE_BYTES]
    mine[: len(encoded)] = np.frombuffer(encoded, dtype=np.uint8)
    buffers = {peer: np.zeros(NOTE_BYTES, dtype=np.uint8) for peer in range(size) if peer != rank}
    posted, receives = [], {}
    for peer, buffer in buffers.items():
        try:  # the communicator returns errors instead of aborting: a dead peer's only loses its answer
            posted.append(comm.Isend([mine, MPI.BYTE], dest=peer, tag=tag))
            receives[peer] = comm.Irecv([buffer, MPI.BYTE], source=peer, tag=tag)
        except MPI.Exception:
            continue
    deadline = time.monotonic() + grace_s
    while receives and time.monotonic() < deadline:
        for peer, request in list(receives.items()):
            try:
                if not request.Test():
                    continue
                heard[peer] = buffers[peer].tobytes().rstrip(b"\0").decode(errors="replace")
            except MPI.Exception:
                pass
            del receives[peer]
        time.sleep(POLL_S)
    # MPI may still read or write these until the job ends: keep them from the garbage collector
    _LEFT_POSTED.append((mine, buffers, posted, receives))
    return heard


def ranks_text(ranks: list[int], hosts: list[str]) -> str:
    """"rank 1 (node a)", "ranks 1, 5 (node a), rank 9 (node b)": grouped by node, a few nodes shown."""
    by_node: dict[str, list[int]] = {}
    for rank in ranks:
        by_node.setdefault(hosts[rank], []).append(rank)
    parts = [f"{'rank' if len(group) == 1 else 'ranks'} {', '.join(map(str, group[:8]))}"
             f"{', ...' if len(group) > 8 else ''} (node {node})" for node, group in list(by_node.items())[:4]]
    more = f" and {len(by_node) - 4} more nodes" if len(by_node) > 4 else ""
    return ", ".join(parts) + more


class Peers:
    """This rank's view of the others while it waits on them. Collective to build (after
    init_torch_distributed): duplicates the communicator and gathers every rank's host and addresses.

    Args:
        timeout_s: world.timeout_s, the collectives' timeout; the roll call lasts min(GRACE_S, it).
    """

    TAG = 1

    def __init__(self, world: World, timeout_s: float) -> None:
        self.world, self.timeout_s = world, timeout_s
        self.grace_s = min(GRACE_S, timeout_s)
        self.comm = world.comm.Dup()  # the roll call's own: nothing else is matched against it
        self.comm.Set_errhandler(MPI.ERRORS_RETURN)
        gathered = self.comm.allgather((world.hostname, host_addresses(world.hostname)))
        self.hosts = [hostname for hostname, _ in gathered]
        self.nodes_at: dict[str, set[str]] = {}  # address -> the nodes that have it
        for hostname, addresses in gathered:
            for address in addresses:
                self.nodes_at.setdefault(address, set()).add(hostname)
        self.epoch: int | None = None
        self.step: int | None = None

    def close(self) -> None:
        self.comm.Free()

    def at(self, epoch: int, step: int | None = None) -> None:
        """Where training is: named in the error if a collective fails from here on."""
        self.epoch, self.step = epoch, step

    def where(self) -> str:
        if self.epoch is None:
            return "at start-up"
        return f"of epoch {self.epoch}" + ("" if self.step is None else f", step {self.step}")

    @contextmanager
    def waiting_in(self, collective: str) -> Iterator[None]:
        """Run a torch.distributed collective; a peer that does not answer raises PeerLost.

        Args:
            collective: what it is, for the message: "the gradient allreduce".
        """
        try:
            yield
        except RuntimeError as err:  # torch.distributed's errors (DistBackendError) are RuntimeErrors
            if isinstance(err, PeerLost) or not silent_peer(err):
                raise
            raise self.lost(f"{collective} {self.where()}", str(err)) from None

    def lost(self, doing: str, backend_error: str) -> PeerLost:
        """Hold the roll call and name who did not answer; `doing` is what this rank waited in."""
        world = self.world
        heard = roll_call(self.comm, self.TAG, doing, self.grace_s)
        missing = [rank for rank in range(world.size) if rank not in heard]
        detail = self.backend_detail(backend_error)
        me = f"rank {world.rank} (node {world.hostname})"
        elsewhere = [f"rank {rank} in {note}" for rank, note in sorted(heard.items()) if note != doing]
        shown = "; ".join(elsewhere[:3]) + ("; ..." if len(elsewhere) > 3 else "")
        others = f" (waiting elsewhere: {shown})" if elsewhere else ""
        if missing:
            message = (
                f"{ranks_text(missing, self.hosts)} did not answer: {me} waited in {doing} "
                f"({detail}; world.timeout_s={self.timeout_s:g}) and a roll call over MPI heard from "
                f"{len(heard)} of {world.size} ranks within {self.grace_s:g} s{others}"
            )
        else:
            message = (
                f"{me} lost a peer in {doing} ({detail}; world.timeout_s={self.timeout_s:g}), yet every "
                f"rank answered a roll call over MPI: the connection between them failed, not a rank"
            )
        return PeerLost(message, reporter=min(heard) == world.rank)

    def backend_detail(self, text: str) -> str:
        """gloo's message, first sentence, without its source location, and with the node of the
        peer address it names."""
        text = SOURCE_PREFIX.sub("", text.strip().splitlines()[0] if text.strip() else "")
        text = text.split(". This is typically")[0][:240]
        found = ADDRESS.search(text)
        if found and found.group(1) in self.nodes_at:
            text += f" [{found.group(1)} is node {', '.join(sorted(self.nodes_at[found.group(1)]))}]"
        return f"torch.distributed: {text}"
