"""Which network module MPICH starts with under Slurm's PMI-2, decided before MPI is initialised.

This module imports no MPI: `hpcshuffle/__init__.py` applies `netmod_defaults` to the process's
environment before any module of the package imports mpi4py (whose import initialises MPI).

Why. Slurm's pmi2 plugin (22.05 here) takes a PMI-1 request from a single read of at most 1,024
bytes (`handle_pmi1_cmd` in src/plugins/mpi/pmi2/pmi1.c). MPICH (the pip wheel, 5.0.2) puts its
business card into PMI in pieces of 511 bytes, hex encoded with runs of zero bytes shortened: a
request line of up to ~1,085 bytes. With the UCX network module the card is 4,096 bytes — UCX's
address and whatever lies after it in memory — so whether a piece compresses below the limit is
chance. When one does not, Slurm reads the line in two, both halves are rejected ("value not
properly terminated in client request", "request not begin with 'cmd='"), and the job hangs at
MPI_Init until UCX gives up. The OFI module's card is the 16-byte socket address: one short line.
So a launch by `srun --mpi=pmi2` defaults to OFI (libfabric picks the provider: tcp here, verbs
or EFA where they exist). mpiexec's own PMI server reads whole lines, so launches under it keep
MPICH's default; a user's own MPIR_CVAR_CH4_NETMOD is always kept.
"""

from __future__ import annotations

from collections.abc import Mapping

NETMOD = "MPIR_CVAR_CH4_NETMOD"
UNDER_SLURM_PMI = "ofi"


def under_slurm_pmi(environ: Mapping[str, str]) -> bool:
    """True in a task that srun started with its pmi2 plugin (which hands it PMI_FD); not in a rank
    that mpiexec's proxy started inside a Slurm step (HYDI_CONTROL_FD), nor outside Slurm."""
    return "PMI_FD" in environ and "SLURM_STEP_ID" in environ and "HYDI_CONTROL_FD" not in environ


def netmod_defaults(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables to add to `environ` before MPI starts: OFI under srun's PMI-2 unless the user
    chose a network module; nothing otherwise."""
    if under_slurm_pmi(environ) and NETMOD not in environ:
        return {NETMOD: UNDER_SLURM_PMI}
    return {}
