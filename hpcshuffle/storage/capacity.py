"""Node-local space: the ranks' claims on their node's local disk (`NodeDemand`, one per rank; see
`stage.demand`) and the verdict on whether a node's claims fit (`check_capacity`), checked before
staging copies anything, so a full disk is named with its numbers instead of failing mid-copy.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hpcshuffle.errors import ConfigError


@dataclass(frozen=True)
class NodeDemand:
    """One rank's claim on its node's local disk."""

    host: str
    need_bytes: int  # to copy now, plus room for what the exchange will bring in
    freed_bytes: int  # held now but to be removed first
    held_bytes: int  # already in the store
    free_bytes: int  # free on the file system holding the store


def check_capacity(local_dir: Path, demands: list[NodeDemand], headroom: float, max_bytes: int | None) -> None:
    """Fail, naming the node and the numbers, if a node's ranks need more than its disk offers.

    `headroom` is what `demand` reserved, named in the message. Every rank calls this with all
    ranks' demands, so all reach the same verdict.
    """
    for host in sorted({d.host for d in demands}):
        mine = [d for d in demands if d.host == host]
        need = sum(d.need_bytes for d in mine)
        freed = sum(d.freed_bytes for d in mine)
        available = min(d.free_bytes for d in mine) + freed
        if max_bytes is not None:
            available = min(available, max_bytes - sum(d.held_bytes for d in mine) + freed)
        if need > available:
            limit = f"storage.max_gib={max_bytes / 2**30:.3g} allows" if max_bytes is not None else "has"
            raise ConfigError(
                f"node-local space on {host}: {local_dir} {limit} {gib(available)} free, but its "
                f"{len(mine)} ranks need {gib(need)} more to hold (1+{headroom:.3g})·N/M of their partitions; "
                "lower q (shuffle.q), use more nodes, or point storage.local_dir at a larger disk",
                collective=True,
            )


def gib(nbytes: float) -> str:
    """`nbytes` for a message: "1.50 GiB", or "12.0 MiB" below one GiB."""
    return f"{nbytes / 2**30:.2f} GiB" if nbytes >= 2**30 else f"{nbytes / 2**20:.1f} MiB"
