"""Data paths: how one strategy's samples reach the training loop during an epoch.

The training loop knows one interface and no strategy::

    path.start_epoch(plan, first_step, row)   # check the store against the plan, set the order
    batches = path.batches()
    for step in ...:
        batch = next(batches)                 # the loop times this as `io`
        path.before_step(step, row, batch_ids)  # count it; post this step's transfers (they overlap FW/BW)
        ... forward / backward / allreduce ...
    path.end_epoch(stopped, row)              # finish the epoch's transfers (or abandon them)

`build_data_path` picks the class from the strategy record's `data_path` (plan/strategies.py),
or the virtual-worker path when one process simulates M workers. Each class counts the samples
it moved and read into the epoch's `RankEpoch` row.
"""

from __future__ import annotations

from hpcshuffle.datapath.base import DataPath, RunContext
from hpcshuffle.datapath.exchange import ExchangePath
from hpcshuffle.datapath.loans import LoanPath
from hpcshuffle.datapath.shared import SharedPath
from hpcshuffle.datapath.store import StorePath
from hpcshuffle.datapath.virtual import VirtualPath
from hpcshuffle.plan import PATH_EXCHANGE, PATH_LOANS, PATH_SHARED, PATH_STORE

DATA_PATHS: dict[str, type[DataPath]] = {
    PATH_STORE: StorePath,
    PATH_EXCHANGE: ExchangePath,
    PATH_LOANS: LoanPath,
    PATH_SHARED: SharedPath,
}


def build_data_path(run: RunContext) -> DataPath:
    """The data path of the run's strategy (virtual workers: the simulation's)."""
    if run.config.shuffle.virtual_workers:
        return VirtualPath(run)
    return DATA_PATHS[run.config.strategy.data_path](run)

__all__ = ["DATA_PATHS", "DataPath", "RunContext", "build_data_path"]
