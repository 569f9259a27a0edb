"""A collective's failure on a silent peer becomes a named PeerLost, and the run exits for requeue.

On one rank (MPI_COMM_SELF) the roll call hears only itself; tests/mpi/test_peer_lost.py freezes
a rank of a real 3-rank run.
"""

from __future__ import annotations

import signal
import time

import pytest
from mpi4py import MPI

from hpcshuffle.comm import chaos
from hpcshuffle.comm.peers import Peers, ranks_text, roll_call, silent_peer
from hpcshuffle.comm.transport import ExchangeStalled
from hpcshuffle.comm.world import World
from hpcshuffle.errors import ConfigError, PeerLost
from hpcshuffle.training.checkpoint import PEER_LOST_EXIT_CODE
from hpcshuffle.training.failure import fail

# what gloo raised here: a frozen peer (world.timeout_s=8), then a killed one
GLOO_TIMEOUT = ("[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] Timed out "
                "waiting 8000ms for recv operation to complete")
GLOO_RESET = ("[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:545] Read error "
              "[10.0.0.2]:55700: Connection reset by peer. This is typically caused by a remote worker hanging "
              "or bugs in the application. Check the logs of the remote worker before reporting an error.")


@pytest.fixture
def world() -> World:
    return World(rank=0, size=1, local_rank=0, local_size=1, node_ranks=(0,), hostname="n1", comm=MPI.COMM_SELF)


@pytest.fixture
def peers(world, tmp_path) -> Peers:
    peers = Peers(world, timeout_s=0.5, run_dir=tmp_path)  # expires by design
    peers.nodes_at = {"10.0.0.2": {"n2"}}  # as gathered at start-up from a second node
    yield peers
    peers.close()


def test_only_a_silent_peer_counts():
    assert silent_peer(RuntimeError(GLOO_TIMEOUT)) and silent_peer(RuntimeError(GLOO_RESET))
    assert silent_peer(RuntimeError("[pair.cc:589] Connection closed by peer [10.0.0.3]:41234"))
    assert not silent_peer(RuntimeError("Tensors must be CPU and dense"))  # a bug: its traceback is wanted


def test_a_collective_that_loses_a_peer_raises_peer_lost_naming_where(peers):
    peers.at(1, 7)
    with pytest.raises(PeerLost) as caught, peers.waiting_in("the gradient allreduce"):
        raise RuntimeError(GLOO_RESET)
    text = str(caught.value)
    assert "rank 0 (node n1) lost a peer in the gradient allreduce of epoch 1, step 7" in text
    assert "Read error [10.0.0.2]:55700: Connection reset by peer [10.0.0.2 is node n2]" in text
    assert "unbound_buffer" not in text and "This is typically" not in text and "world.timeout_s=0.5" in text
    assert text.endswith("the job script requeues and resumes from the last checkpoint; or resubmit")
    assert caught.value.reporter


def test_only_the_first_rank_to_end_its_roll_call_reports(peers):
    """Ranks end their roll calls up to world.timeout_s apart; the first to end prints at once, so
    a later one cannot abort the job before the loss is named, nor name it a second time."""
    first, later = peers.lost("the gradient allreduce", GLOO_RESET), peers.lost("the gradient allreduce", GLOO_TIMEOUT)
    assert first.reporter and not later.reporter


def test_other_errors_pass_through_unchanged(peers):
    bug = "^Tensors must be CPU and dense$"
    with pytest.raises(RuntimeError, match=bug), peers.waiting_in("the gradient allreduce"):
        raise RuntimeError("Tensors must be CPU and dense")


def test_where_follows_training(peers):
    assert peers.where() == "at start-up"
    peers.at(2)
    assert peers.where() == "of epoch 2"


def test_the_roll_call_of_one_rank_hears_itself_without_waiting(tmp_path):
    assert roll_call(tmp_path, 0, 1, "the gradient allreduce of epoch 0, step 2", grace_s=60) == {
        0: "the gradient allreduce of epoch 0, step 2"}


def test_the_roll_call_hears_who_answers_within_the_grace(tmp_path):
    (tmp_path / "rank2").write_text("validation of epoch 3")  # rank 2 answered; rank 1 never does
    started = time.monotonic()
    heard = roll_call(tmp_path, 0, 3, "the gradient allreduce of epoch 3, step 1", grace_s=0.5)
    assert heard == {0: "the gradient allreduce of epoch 3, step 1", 2: "validation of epoch 3"}
    assert 0.5 <= time.monotonic() - started < 2


def test_missing_ranks_are_named_by_node():
    hosts = ["a", "a", "b", "b"]
    assert ranks_text([1], hosts) == "rank 1 (node a)"
    assert ranks_text([1, 2, 3], hosts) == "rank 1 (node a), ranks 2, 3 (node b)"


@pytest.mark.parametrize("error", [PeerLost("rank 1 (node a) did not answer"), ExchangeStalled("no exchange progress")])
def test_a_lost_peer_exits_76_with_one_line(world, capsys, error):
    with pytest.raises(SystemExit) as caught:
        fail(world, error)
    assert caught.value.code == PEER_LOST_EXIT_CODE == 76
    err = capsys.readouterr().err
    assert err.startswith("hpcshuffle: peer lost, on rank 0: ") and err.count("\n") == 1 and "Traceback" not in err


def test_bad_input_still_exits_2(world, capsys):
    with pytest.raises(SystemExit) as caught:
        fail(world, ConfigError("shuffle.q must be in [0, 1], got 2"))
    assert caught.value.code == 2


def test_chaos_stop_freezes_the_named_rank_at_the_named_point(monkeypatch):
    sent = []
    monkeypatch.setenv(chaos.STOP_ENV, "1:2:iteration-5")
    monkeypatch.setattr(chaos.os, "kill", lambda pid, signum: sent.append(signum))
    chaos._target.cache_clear()
    try:
        chaos.point(0, 2, "iteration-5")
        chaos.point(1, 2, "iteration-4")
        assert sent == []
        chaos.point(1, 2, "iteration-5")
        assert sent == [signal.SIGSTOP]
    finally:
        chaos._target.cache_clear()
