"""Who stopped answering: a torch.distributed collective's failure turned into a named `PeerLost`.

A gloo collective that waits world.timeout_s on a frozen rank ("Timed out waiting 8000ms for recv
operation to complete"), or loses the connection to a dead one ("Connection reset by peer"), says
neither which rank nor which node. `Peers.waiting_in` catches that failure, and the surviving
ranks hold a roll call in the run directory (which every rank shares, as checkpoints need): each
writes what it was waiting in to a file of its own and reads the others' for a short grace period.
Not over MPI: after a link failure MPI's own transport may crash a process that sends to the
unreachable peer (MPICH's UCX did, here), and the roll call must work exactly then. The ranks
never heard from are the lost ones, named with their nodes; a peer address in gloo's text is
named with its node too, from the addresses every rank gave at start-up.

The rank whose roll call ends first reports (it creates the directory's REPORTED file first); the
others stay quiet and abort the job a little later (training/failure.py). Ranks enter the roll
call up to world.timeout_s apart (a dead peer's connection resets at once, a peer waiting on a
live one times out), so a rule such as "the lowest rank heard reports" could pick a rank still
in its roll call when an earlier one aborts the job: then nobody named the loss.
"""

from __future__ import annotations

import re
import shutil
import socket
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from hpcshuffle.comm.world import World
from hpcshuffle.errors import PeerLost
from hpcshuffle.files import atomic_write, create_first

GRACE_S = 10.0  # the roll call's length at most; ranks that time out on the same collective do so within it
POLL_S = 0.01
ROLL_CALL_DIR = ".roll_call"  # in the run directory
REPORTED = "reported"  # in a roll call's directory: the reporting rank, written by it
# how torch.distributed's backends word a peer that does not answer, lowercased
SILENT_PEER = (
    "timed out", "connection closed", "connection reset", "broken pipe", "connection refused",
    "communicator was aborted", "collective operation timeout",
)
ADDRESS = re.compile(r"\[([0-9A-Fa-f:.]+)\]:(\d+)")  # gloo names a pair's peer as [ip]:port
SOURCE_PREFIX = re.compile(r"^\[[^\]]*\.(?:cc|cpp|h):\d+\]\s*")  # "[.../unbound_buffer.cc:78] "


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


def roll_call(directory: Path, rank: int, size: int, note: str, grace_s: float) -> dict[int, str]:
    """Write `note` as this rank's answer in `directory` and read the others' for at most `grace_s` s.

    Returns:
        {rank: its note} for this rank and every rank whose answer appeared within `grace_s`.
    """
    atomic_write(directory / f"rank{rank}", [note.encode()], durable=False)
    heard = {rank: note}
    deadline = time.monotonic() + grace_s
    while True:
        for peer in range(size):
            if peer not in heard:
                try:
                    heard[peer] = (directory / f"rank{peer}").read_text(errors="replace")
                except OSError:
                    pass
        if len(heard) == size or time.monotonic() >= deadline:
            return heard
        time.sleep(POLL_S)


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
    init_torch_distributed): gathers every rank's host and addresses, makes this job's roll-call
    directory under `run_dir` (rank 0 does).

    Args:
        timeout_s: world.timeout_s, the collectives' timeout; the roll call lasts min(GRACE_S, it).
    """

    def __init__(self, world: World, timeout_s: float, run_dir: Path) -> None:
        self.world, self.timeout_s = world, timeout_s
        self.grace_s = min(GRACE_S, timeout_s)
        # this job's own roll-call directory: answers of an earlier failure of the run never count.
        # Made by rank 0 now, not by the survivors together at the roll call: ranks of several nodes
        # making one directory at once on a shared file system can fail ("Stale file handle")
        token = uuid.uuid4().hex[:12]
        if world.is_root:
            (run_dir / ROLL_CALL_DIR / token).mkdir(parents=True)
        self.directory = run_dir / ROLL_CALL_DIR / world.comm.bcast(token, root=0)
        gathered = world.comm.allgather((world.hostname, host_addresses(world.hostname)))
        self.hosts = [hostname for hostname, _ in gathered]
        self.nodes_at: dict[str, set[str]] = {}  # address -> the nodes that have it
        for hostname, addresses in gathered:
            for address in addresses:
                self.nodes_at.setdefault(address, set()).add(hostname)
        self.epoch: int | None = None
        self.step: int | None = None

    def close(self) -> None:
        """After a clean end: the directory of a roll call that never took place goes."""
        if self.world.is_root:
            shutil.rmtree(self.directory, ignore_errors=True)

    def at(self, epoch: int, step: int | None = None) -> None:
        """Where training is: named in the error if a collective fails from here on."""
        self.epoch, self.step = epoch, step

    def where(self) -> str:
        """Where training is, for messages: "at start-up", "of epoch E" or "of epoch E, step S"."""
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
        heard = roll_call(self.directory, world.rank, world.size, doing, self.grace_s)
        missing = [rank for rank in range(world.size) if rank not in heard]
        detail = self.backend_detail(backend_error)
        me = f"rank {world.rank} (node {world.hostname})"
        elsewhere = [f"rank {rank} in {note}" for rank, note in sorted(heard.items()) if note != doing]
        shown = "; ".join(elsewhere[:3]) + ("; ..." if len(elsewhere) > 3 else "")
        others = f" (waiting elsewhere: {shown})" if elsewhere else ""
        if missing:
            message = (
                f"{ranks_text(missing, self.hosts)} did not answer: {me} waited in {doing} "
                f"({detail}; world.timeout_s={self.timeout_s:g}) and a roll call in the run directory heard from "
                f"{len(heard)} of {world.size} ranks within {self.grace_s:g} s{others}"
            )
        else:
            message = (
                f"{me} lost a peer in {doing} ({detail}; world.timeout_s={self.timeout_s:g}), yet every "
                f"rank answered a roll call in the run directory: the connection between them failed, not a rank"
            )
        return PeerLost(message, reporter=create_first(self.directory / REPORTED, f"{world.rank}\n"))

    def backend_detail(self, text: str) -> str:
        """gloo's message, first sentence, without its source location, and with the node of the
        peer address it names."""
        text = SOURCE_PREFIX.sub("", text.strip().splitlines()[0] if text.strip() else "")
        text = text.split(". This is typically")[0][:240]
        found = ADDRESS.search(text)
        if found and found.group(1) in self.nodes_at:
            text += f" [{found.group(1)} is node {', '.join(sorted(self.nodes_at[found.group(1)]))}]"
        return f"torch.distributed: {text}"
