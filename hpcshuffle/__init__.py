"""hpcshuffle: choose per run how much shuffling data-parallel training pays for."""

import os

from hpcshuffle.comm.netmod import netmod_defaults

# before any module of the package imports mpi4py, whose import starts MPI (comm/netmod.py says why)
os.environ.update(netmod_defaults(os.environ))

__version__ = "0.1.0"
