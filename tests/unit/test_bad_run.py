"""A run that cannot work is refused before its first step, with a message that names the problem.

Checked in-process: the config is composed as `python -m hpcshuffle.train` composes it and given
to `train.run` on a world of one rank (MPI_COMM_SELF), so each case costs milliseconds instead of
an `mpiexec` launch. That every rank of a real job ends on such an error, without a traceback, is
shown by the launches of tests/mpi/test_bad_input.py.
"""

from __future__ import annotations

import signal
import socket

import pytest
import torch
from hydra import compose, initialize_config_dir
from mpi4py import MPI

from hpcshuffle.comm.world import World
from hpcshuffle.errors import ConfigError
from hpcshuffle.formats.catalog import Catalog, DatasetError
from hpcshuffle.train import CONFIG_DIR, run
from hpcshuffle.training.checkpoint import Preemption
from hpcshuffle.training.run import plan_spec
from tests.conftest import SMALL_SAMPLES, train_args
from tests.unit.test_config import run_config

ONE_RANK = World(rank=0, size=1, local_rank=0, local_size=1, node_ranks=(0,), hostname=socket.gethostname(),
                 comm=MPI.COMM_SELF)


@pytest.fixture
def refused(small_dataset, tmp_path):
    """`refused(*overrides)`: the message of the error a one-rank run with them ends with."""
    kept = {sig: signal.getsignal(sig) for sig in Preemption.SIGNALS}  # a run installs its own handlers

    def start(*overrides: str) -> str:
        args = train_args(small_dataset, tmp_path / "run", tmp_path / "store", *overrides)
        overrides = [arg for arg in args[2:] if not arg.startswith("hydra.")]
        with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
            cfg = compose(config_name="config", overrides=overrides)
        with pytest.raises((ConfigError, DatasetError)) as refusal:
            run(cfg, ONE_RANK, tmp_path / "run")
        return str(refusal.value)

    yield start
    for sig, handler in kept.items():
        signal.signal(sig, handler)


@pytest.mark.parametrize(
    ("overrides", "fragments"),
    [
        (["shuffle=partial", "shuffle.q=1.5"], ["shuffle.q must be in [0, 1], got 1.5"]),
        (["shuffle=partial", "shuffle.q=-0.1"], ["shuffle.q must be in [0, 1], got -0.1"]),
        (["shuffle=local", "shuffle.q=0.3"], ["shuffle=local means q=0.0", "shuffle=partial shuffle.q=0.3"]),
        (["shuffle=partial", "batch_size=300"],
         ["batch size 300 is larger than a worker's share", f"⌊{SMALL_SAMPLES}/1⌋ = {SMALL_SAMPLES}"]),
        (["shuffle=local", "storage.replica=true"], ["storage.replica=true keeps a full replica per node"]),
        (["dataset.root=/nonexistent/imagenet"], ["/nonexistent/imagenet/train not found", "hpcshuffle synth"]),
        (["storage.shared_reads=sometimes"], ["storage.shared_reads must be one of ('uncached', 'cached')"]),
        (["storage.shared_dir=/proc"], ["is not under storage.shared_dir /proc", "storage.shared_dir=null"]),
        (["checkpoint.resume=require"], ["checkpoint.resume=require but", "holds no checkpoint.pt", "hydra.run.dir"]),
        pytest.param(
            ["device=cuda"], ["device=cuda but no GPU is visible; use device=cpu"],
            marks=pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is visible here"),
        ),
    ],
)
def test_bad_config_is_named(refused, overrides, fragments):
    message = refused(*overrides)
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"


def test_a_label_skewed_partition_of_a_dataset_without_classes_is_refused(tmp_path):
    # DeepCAM's listing gives every sample label 0 (its labels are per pixel, in the files): a Dirichlet
    # split of that would be one class, so the run must refuse it rather than train on it
    config = run_config("dataset=synthetic_deepcam", "storage.partition=dirichlet-0.1", "batch_size=4")
    catalog = Catalog(tmp_path, (), tuple(f"{i}.h5" for i in range(40)), (0,) * 40)
    with pytest.raises(ConfigError, match=r"storage.partition=dirichlet-0.1 splits by class.*not deepcam"):
        plan_spec(ONE_RANK, config, catalog, workers=4)
    config = run_config("storage.partition=dirichlet-0.1", "batch_size=4")  # an ImageFolder lists its classes
    catalog = Catalog(tmp_path, ("a", "b", "c", "d"), tuple(f"{i}.png" for i in range(40)),
                      tuple(i % 4 for i in range(40)))
    assert plan_spec(ONE_RANK, config, catalog, workers=4).partition == "dirichlet-0.1"
