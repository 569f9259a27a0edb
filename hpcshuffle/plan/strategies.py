"""The strategy table: what each shuffling strategy means, in one record per strategy.

Everything outside `plan/` asks a `Strategy` record instead of testing a strategy's name: the
training run picks its data path by `data_path`, staging sizes the store by `headroom`, config
checks which options apply by `home`, tune-q and report find their reference and baseline by
`role`. Adding a strategy means one planner module, one `Strategy` entry in `STRATEGIES`, and one
`conf/shuffle/<name>.yaml`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from hpcshuffle.plan.common import EpochPlan, PlanSpec
from hpcshuffle.plan.corgipile import plan_corgipile
from hpcshuffle.plan.global_ import plan_global
from hpcshuffle.plan.local import plan_local
from hpcshuffle.plan.locality import plan_locality
from hpcshuffle.plan.partial import plan_partial
from hpcshuffle.plan.streaming import plan_streaming_py1br, plan_streaming_py1e

Planner = Callable[[PlanSpec, list[np.ndarray], int], EpochPlan]

# where a rank's training samples live between epochs
HOME_STORE = "store"  # its partition, staged to node-local storage
HOME_SHARED = "shared"  # shared storage (optionally a node replica or a planned cache in front of it)

# the data path that carries a strategy's samples during an epoch (datapath/ maps these to classes)
PATH_STORE = "store"  # read the rank's store; nothing moves
PATH_EXCHANGE = "exchange"  # read the store while a fraction q moves to peers for the next epoch
PATH_LOANS = "loans"  # read the store, lend and borrow samples for one step
PATH_SHARED = "shared"  # read shared storage (a replica or a planned cache may serve it)


@dataclass(frozen=True)
class Strategy:
    """One row of the strategy table.

    Attributes:
        name: the `shuffle=` value (`conf/shuffle/<name>.yaml`).
        planner: `(spec, held, epoch) -> EpochPlan`, pure and seeded.
        fixed_q: the q the strategy implies (local 0, global 1), None where q is the user's.
        home: HOME_STORE or HOME_SHARED, where a rank's samples live between epochs.
        data_path: which data path carries the epoch (PATH_*).
        on_q_axis: its accuracy is a point of the q curve that tune-q searches (local is q = 0).
        role: "reference" (what tune-q compares accuracy with), "baseline" (what report divides
            epoch times by) or "" for neither.
        blocks: it reads shared storage in blocks of consecutive ids (shuffle.block) and shuffles
            them within a window of shuffle.buffer samples (CorgiPile's buffer, Streaming's shuffle
            block), not one sample at a time.
        peers_venv: its planner runs a peer's own package in the peers' venv (`make peers`), and
            cannot plan without it (plan/streaming.py).
    """

    name: str
    planner: Planner
    fixed_q: float | None
    home: str
    data_path: str
    on_q_axis: bool = False
    role: str = ""
    blocks: bool = False
    peers_venv: bool = False

    def q_for(self, requested: float | None) -> float:
        """The q a run of this strategy has: the fixed one, or the requested one (which must agree)."""
        if self.fixed_q is None:
            if requested is None:
                raise ValueError(
                    f"shuffle={self.name} needs q, the fraction exchanged per epoch, in [0, 1] "
                    f"(shuffle.q=Q in a training config, --q Q on the command line)"
                )
            return float(requested)
        if requested is not None and float(requested) != self.fixed_q:
            movable = ", ".join(s.name for s in STRATEGIES.values() if s.fixed_q is None)
            raise ValueError(
                f"shuffle={self.name} means q={self.fixed_q}, got q={requested}; to exchange a fraction use "
                f"shuffle={movable} shuffle.q={requested} (on the command line: --shuffle {movable} --q {requested})"
            )
        return self.fixed_q

    @property
    def trains_from_shared(self) -> bool:
        """Its epochs read shared storage: every sample, or those no node holds."""
        return self.home == HOME_SHARED or self.data_path == PATH_LOANS

    def headroom(self, spec: PlanSpec) -> float:
        """Extra node-local room, as a fraction of a partition, that the epoch's moves need:
        ⌈(1+q)·N/nodes⌉ / ⌈N/nodes⌉ − 1 for a strategy that exchanges samples, 0 otherwise."""
        if self.data_path != PATH_EXCHANGE:
            return 0.0
        return spec.storage_headroom()

    @property
    def local_order(self) -> bool:
        """Each node trains on a shuffle of what it holds (LS, PLS), rather than on global batches."""
        return self.data_path in (PATH_STORE, PATH_EXCHANGE)

    @property
    def node_scope(self) -> bool:
        """Whether the ranks of a node can share its partition (storage.scope=node): a strategy whose
        samples live in node-local stores. One that reads shared storage has no partition."""
        return self.home == HOME_STORE


STRATEGIES: dict[str, Strategy] = {
    strategy.name: strategy
    for strategy in (
        Strategy("local", plan_local, 0.0, HOME_STORE, PATH_STORE, on_q_axis=True, role="baseline"),
        Strategy("partial", plan_partial, None, HOME_STORE, PATH_EXCHANGE, on_q_axis=True),
        Strategy("locality", plan_locality, 0.0, HOME_STORE, PATH_LOANS),
        Strategy("global", plan_global, 1.0, HOME_SHARED, PATH_SHARED, role="reference"),
        Strategy("corgipile", plan_corgipile, 1.0, HOME_SHARED, PATH_SHARED, blocks=True),
        # MosaicML Streaming: a worker keeps its shards every epoch, so nothing moves (q = 0)
        Strategy("streaming_py1e", plan_streaming_py1e, 0.0, HOME_SHARED, PATH_SHARED, blocks=True, peers_venv=True),
        Strategy("streaming_py1br", plan_streaming_py1br, 0.0, HOME_SHARED, PATH_SHARED, blocks=True, peers_venv=True),
    )
}


def get_strategy(name: str) -> Strategy:
    """The strategy record named `name`; ValueError naming the known ones otherwise."""
    try:
        return STRATEGIES[name]
    except KeyError:
        raise ValueError(f"unknown shuffle {name!r}; choose one of {sorted(STRATEGIES)}") from None


def with_role(role: str) -> Strategy:
    """The strategy that plays `role` ("reference" or "baseline")."""
    return next(strategy for strategy in STRATEGIES.values() if strategy.role == role)


def run_label(shuffle: str, q: float, scope: str | None = "rank") -> str:
    """How tables and plots name a run: 'local', 'global', or 'partial-0.3' where q is the user's;
    'partial-0.3-node' where a node's ranks shared its partition (storage.scope=node)."""
    strategy = STRATEGIES.get(shuffle)
    label = shuffle if strategy is not None and strategy.fixed_q is not None else f"{shuffle}-{q:g}"
    return label + ("-node" if scope == "node" else "")
