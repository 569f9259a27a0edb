"""hpcshuffle: choose per run how much shuffling data-parallel training pays for."""

import os

from hpcshuffle.comm.netmod import netmod_defaults
from hpcshuffle.storage.worker_start import NOT_A_RANK

# before any module of the package imports mpi4py, whose import starts MPI (comm/netmod.py says why)
os.environ.update(netmod_defaults(os.environ))
if os.environ.get(NOT_A_RANK):  # a loader worker or its server (storage/worker_start.py): never MPI
    import mpi4py

    mpi4py.rc.initialize = mpi4py.rc.finalize = False

__version__ = "0.1.0"
