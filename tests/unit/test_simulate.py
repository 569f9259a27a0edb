"""Virtual workers: ghost batch norm, worker-mean loss and the global batch layout against M
separate workers computed one by one (the real M-rank comparison is tests/mpi/test_simulator.py)."""

import copy

import pytest
import torch
from torch import nn

from hpcshuffle.cli import main, simulate_argv
from hpcshuffle.models import build
from hpcshuffle.plan import PlanSpec, plan_epochs
from hpcshuffle.training.simulate import (
    GhostBatchNorm,
    WorkerMeanLoss,
    fold_running_stats,
    ghost_batch_norm,
    split_by_worker,
    virtual_order,
)

WORKERS, BATCH = 4, 6


def per_worker_reference(model: nn.Module, images, labels, weight=None):
    """M copies of `model`, each trained on its own local batch: mean loss, mean gradients,
    mean running statistics (what a real run's allreduce and validation-time averaging give)."""
    losses, grads, buffers = [], [], []
    for worker in range(WORKERS):
        replica = copy.deepcopy(model)
        part = slice(worker * BATCH, (worker + 1) * BATCH)
        loss = nn.CrossEntropyLoss(weight=weight)(replica(images[part]), labels[part])
        loss.backward()
        losses.append(loss.item())
        grads.append([p.grad.clone() for p in replica.parameters()])
        buffers.append([b.clone() for b in replica.buffers() if b.is_floating_point()])
    mean_grads = [torch.stack(g).mean(0) for g in zip(*grads)]
    mean_buffers = [torch.stack(b).mean(0) for b in zip(*buffers)]
    return sum(losses) / WORKERS, mean_grads, mean_buffers


@pytest.mark.parametrize("chunk", [WORKERS, 1, 3])
def test_virtual_step_equals_the_mean_of_per_worker_steps(chunk):
    torch.manual_seed(0)
    model = build("small_cnn", num_classes=5, in_channels=3, width=4)
    images = torch.randn(WORKERS * BATCH, 3, 8, 8) * 3 + 1
    labels = torch.randint(0, 5, (WORKERS * BATCH,))
    weight = torch.tensor([1.0, 2.0, 0.5, 1.0, 3.0])
    want_loss, want_grads, want_buffers = per_worker_reference(model, images, labels, weight)

    virtual = copy.deepcopy(model)
    assert ghost_batch_norm(virtual, BATCH) == 3
    assert virtual.state_dict().keys() == model.state_dict().keys()  # checkpoints move between modes
    loss_fn = WorkerMeanLoss(nn.CrossEntropyLoss(weight=weight, reduction="none"), weight, BATCH, WORKERS)
    total = 0.0
    for start in range(0, len(images), chunk * BATCH):
        part = slice(start, start + chunk * BATCH)
        loss = loss_fn(virtual(images[part]), labels[part])
        loss.backward()
        total += loss.item()
    fold_running_stats(virtual)

    assert total == pytest.approx(want_loss, abs=1e-6)
    for got, want in zip(virtual.parameters(), want_grads):
        torch.testing.assert_close(got.grad, want, atol=1e-6, rtol=1e-5)
    got_buffers = [b for b in virtual.buffers() if b.is_floating_point()]
    for got, want in zip(got_buffers, want_buffers):
        torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-5)
    assert all(m.num_batches_tracked.item() == 1 for m in virtual.modules() if isinstance(m, GhostBatchNorm))


def test_ghost_batch_norm_differs_from_one_large_batch():
    # the point of it: normalising per worker is not normalising the global batch
    torch.manual_seed(1)
    layer = nn.BatchNorm2d(3)
    images = torch.randn(WORKERS * BATCH, 3, 4, 4) + torch.arange(WORKERS).repeat_interleave(BATCH)[:, None, None, None]
    ghost = GhostBatchNorm(copy.deepcopy(layer), BATCH)
    assert not torch.allclose(ghost(images), layer(images), atol=1e-3)


def test_ghost_batch_norm_in_eval_mode_uses_running_statistics():
    layer = nn.BatchNorm1d(2)
    layer.running_mean.fill_(1.0)
    ghost = GhostBatchNorm(copy.deepcopy(layer), BATCH).eval()
    x = torch.randn(5, 2)  # any batch size: no groups in eval mode
    torch.testing.assert_close(ghost(x), layer.eval()(x))


def test_a_batch_that_is_not_whole_local_batches_is_refused():
    ghost = GhostBatchNorm(nn.BatchNorm2d(3), BATCH)
    with pytest.raises(ValueError, match="not whole local batches of 6"):
        ghost(torch.randn(BATCH + 1, 3, 2, 2))


def test_virtual_order_lays_out_each_step_rank_by_rank_and_splits_back():
    spec = PlanSpec(num_samples=103, num_ranks=WORKERS, batch_size=5, q=0.3, seed=2)
    plan = next(plan_epochs(spec, "partial", 1))
    order = virtual_order(plan, 0)
    assert len(order) == spec.max_share * WORKERS == 104  # 26 per rank: 5 steps of 5, then one of 1
    assert order[:5].tolist() == plan.order[0][:5].tolist()
    assert order[5:10].tolist() == plan.order[1][:5].tolist()
    assert order[WORKERS * 5 : WORKERS * 5 + 5].tolist() == plan.order[0][5:10].tolist()
    workers = split_by_worker(order.tolist(), spec)
    assert order[-WORKERS:].tolist() == [plan.order[r][-1] for r in range(WORKERS)]  # the short last step
    assert workers == [plan.order[r].tolist() for r in range(WORKERS)]
    # from a step on (a resumed epoch): the tail of the same layout
    assert virtual_order(plan, 2).tolist() == order[2 * WORKERS * 5 :].tolist()


@pytest.mark.parametrize("argv", [[], ["x", "epochs=1"], ["0"], ["-3"]])
def test_simulate_needs_a_positive_worker_count(argv, capsys):
    with pytest.raises(SystemExit) as stop:
        main(["simulate", *argv])
    assert stop.value.code == 2
    assert "M, the number of virtual workers, must be a positive integer" in capsys.readouterr().err


def test_simulate_is_train_with_virtual_workers():
    assert simulate_argv(["64", "shuffle=partial"]) == ["shuffle.virtual_workers=64", "shuffle=partial"]
