"""The model side of a step: the network, its optimizer and loss, forward/backward, and the
gradient allreduce (torch.distributed: gloo on CPU, NCCL on GPU).

With virtual workers (simulate.py) the same object trains as M workers would: BatchNorm layers
normalise each worker's local batch and the loss is the mean over workers, so nothing outside
this module and the virtual data path knows a run is simulated.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

from hpcshuffle import models
from hpcshuffle.comm.peers import Peers
from hpcshuffle.comm.world import World, on_root
from hpcshuffle.config import RunConfig
from hpcshuffle.errors import ConfigError
from hpcshuffle.formats.codec import Codec
from hpcshuffle.training.evaluate import Scores
from hpcshuffle.training.norm import global_batch_norm
from hpcshuffle.training.optim import build_optimizer, set_learning_rate
from hpcshuffle.training.simulate import (
    WorkerMeanLoss,
    fold_running_stats,
    ghost_batch_norm,
    set_local_batch,
)


def pick_device(config: RunConfig, world: World) -> torch.device:
    """The rank's device: the CPU, or with device=cuda GPU local_rank mod the node's GPUs, made
    current; ConfigError (collective) when no GPU is visible."""
    if config.device != "cuda":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise ConfigError("device=cuda but no GPU is visible; use device=cpu", collective=True)
    # one GPU per rank on a node (Slurm's --gpus-per-task may leave each rank just one visible)
    device = torch.device("cuda", world.local_rank % torch.cuda.device_count())
    torch.cuda.set_device(device)
    return device


def load_weights(model: nn.Module, path: Path) -> None:
    """Start from a saved state dict; tensors whose shape differs (a new classifier head) stay fresh."""
    if not path.is_file():
        raise ConfigError(f"model.weights {path} is not a file; pass a state dict saved with torch.save")
    try:
        saved = torch.load(path, map_location="cpu", weights_only=True)
    except (RuntimeError, pickle.UnpicklingError, EOFError) as err:
        raise ConfigError(f"cannot load model.weights {path} as a state dict: {err}") from None
    own = model.state_dict()
    kept = {name: tensor for name, tensor in saved.items() if name in own and own[name].shape == tensor.shape}
    if not kept:
        raise ConfigError(f"model.weights {path} shares no tensor with model {type(model).__name__}; wrong file?")
    model.load_state_dict(kept, strict=False)
    fresh = sorted(set(own) - set(kept))
    print(f"model.weights: loaded {len(kept)} tensors from {path}; fresh: {fresh[:6]}", flush=True)


def average_gradients(model: nn.Module, world_size: int) -> None:
    """Collective: replace every gradient by its mean over the `world_size` ranks (one allreduce of
    all gradients flattened together)."""
    if world_size == 1:
        return  # nothing to average: spare the flatten/unflatten copies of every gradient
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    flat = _flatten_dense_tensors(grads)
    dist.all_reduce(flat)
    flat /= world_size
    for grad, averaged in zip(grads, _unflatten_dense_tensors(flat, grads)):
        grad.copy_(averaged)


def average_buffers(model: nn.Module, world_size: int) -> None:
    """Average BatchNorm running statistics so every rank validates the same model."""
    if world_size == 1:
        return
    for buffer in model.buffers():
        if buffer.is_floating_point():
            dist.all_reduce(buffer)
            buffer /= world_size


class Learner:
    """One rank's model, optimizer and loss. Collective to build: every rank starts from rank 0's weights.

    Args:
        virtual_workers: 0, or M when this process simulates M workers.
        peers: its collectives run inside `peers.waiting_in`: a peer that does not answer
            within world.timeout_s raises PeerLost naming it.
    """

    def __init__(self, config: RunConfig, world: World, codec: Codec, device: torch.device, virtual_workers: int,
                 peers: Peers) -> None:
        self.config, self.world, self.codec, self.device, self.peers = config, world, codec, device, peers
        self.virtual = virtual_workers
        self.bf16 = config.precision == "bf16"
        self.memory_format = torch.channels_last if config.channels_last else torch.contiguous_format
        # the training stream only: with loader.decode=gpu a side stream decodes the next batch meanwhile
        self.sync = torch.cuda.current_stream(device).synchronize if device.type == "cuda" else None
        self.model = self.build_model()
        self.optimizer = build_optimizer(self.model, config.optim)
        self.loss_fn = self.build_loss()

    def build_model(self) -> nn.Module:
        """Collective: the model of model.name for the codec's channels and classes, with model.weights
        loaded on rank 0, its BatchNorm layers replaced for model.norm=global or virtual workers, on the
        device, and every rank's tensors set to rank 0's. ConfigError (collective) for bad options."""
        options = dict(self.config.model.options)
        weights = options.pop("weights", None)  # a local state dict to start from (fine-tuning)
        try:
            model = models.build(self.config.model.name, num_classes=self.codec.num_classes,
                                 in_channels=self.codec.in_channels, **options)
        except ValueError as err:
            raise ConfigError(str(err), collective=True) from err
        if weights is not None:
            on_root(self.world, lambda: load_weights(model, Path(weights)), ConfigError, OSError)
        if self.config.model.norm == "global":
            try:
                replaced = global_batch_norm(model, self.config.model.name)
            except ValueError as err:
                raise ConfigError(str(err), collective=True) from err
            if self.world.is_root:
                print(f"model.norm=global: {replaced} BatchNorm layers normalise over the global batch of "
                      f"{self.virtual or self.world.size} x {self.config.batch_size}", flush=True)
        elif self.virtual:
            replaced = ghost_batch_norm(model, self.config.batch_size)
            if self.world.is_root:
                print(f"virtual workers: {self.virtual}, {replaced} BatchNorm layers normalise each worker's "
                      f"local batch of {self.config.batch_size}", flush=True)
        model = model.to(self.device, memory_format=self.memory_format)
        with self.peers.waiting_in("the broadcast of rank 0's initial weights"):
            for tensor in list(model.parameters()) + list(model.buffers()):
                dist.broadcast(tensor.data, src=0)  # every rank starts from rank 0's initial weights
        return model

    def build_loss(self) -> nn.Module | WorkerMeanLoss:
        """Cross-entropy with dataset.class_weights and, for classification, loss.label_smoothing; with
        virtual workers the mean over workers of each worker's mean (`WorkerMeanLoss`)."""
        weights = self.config.dataset.class_weights
        if weights is not None and len(weights) != self.codec.num_classes:
            raise ConfigError(f"dataset.class_weights has {len(weights)} entries for {self.codec.num_classes} classes",
                              collective=True)
        weight = None if weights is None else torch.tensor(weights, device=self.device)
        smoothing = self.config.loss.label_smoothing if self.codec.task == "classify" else 0.0
        if self.virtual:
            per_element = nn.CrossEntropyLoss(weight=weight, label_smoothing=smoothing, reduction="none")
            return WorkerMeanLoss(per_element, weight, self.config.batch_size, self.virtual)
        return nn.CrossEntropyLoss(weight=weight, label_smoothing=smoothing)

    def set_learning_rate(self, lr: float) -> None:
        """Set every parameter group's learning rate to `lr`."""
        set_learning_rate(self.optimizer, lr)

    def to_device(self, inputs: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """A batch on the learner's device (inputs in its memory format), copied without blocking."""
        inputs = inputs.to(self.device, non_blocking=True, memory_format=self.memory_format)
        return inputs, targets.to(self.device, non_blocking=True)

    def forward_backward(self, images: torch.Tensor | None, labels: torch.Tensor) -> float | None:
        """Gradients of the batch's loss; returns the loss (None for a batch whose samples were all
        skipped: zero gradients, so the rank still joins the allreduce). Virtual workers' batches go
        through `virtual_chunk` workers at a time."""
        self.optimizer.zero_grad(set_to_none=True)
        if images is None:
            for parameter in self.model.parameters():
                parameter.grad = torch.zeros_like(parameter)
            return None
        images, labels = self.to_device(images, labels)
        size = len(images)
        if self.virtual:
            local = size // self.virtual
            set_local_batch(self.model, self.loss_fn, local)
            size = local * (self.config.shuffle.virtual_chunk or self.virtual)
        total = 0.0
        for start in range(0, len(images), size):
            with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16):
                chunk = slice(start, start + size)
                loss = self.loss_fn(self.model(images[chunk]), labels[chunk])
            loss.backward()
            total += loss.item()
        if self.virtual:
            fold_running_stats(self.model)  # once per step, as each real worker's BN does
        return total

    def allreduce_and_step(self) -> None:
        """Collective: average the gradients over the ranks, then take the optimizer's step; PeerLost if
        a peer does not answer within world.timeout_s."""
        with self.peers.waiting_in("the gradient allreduce"):
            average_gradients(self.model, self.world.size)
        self.optimizer.step()

    @torch.no_grad()
    def validate(self, loader) -> dict[str, float]:
        """Collective: the validation scores of `loader` summed over every rank (`Scores.summary`), after
        averaging the BatchNorm statistics over the ranks so every rank scores one model."""
        with self.peers.waiting_in("the allreduce of BatchNorm statistics before validation"):
            average_buffers(self.model, self.world.size)
        self.model.eval()
        scores = Scores(self.codec.task, self.codec.num_classes, self.device)
        for images, labels, _, _ in loader:
            if images is None:
                continue
            images, labels = self.to_device(images, labels)
            with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16):
                logits = self.model(images)
            scores.add(logits.float(), labels)
        with self.peers.waiting_in("the allreduce of validation scores"):
            dist.all_reduce(scores.counts)  # on the device: NCCL reduces GPU tensors only
        self.model.train()
        return scores.summary()

    def rank_buffers(self) -> dict[str, torch.Tensor]:
        """BatchNorm statistics, per rank until averaged at the epoch's end (for a mid-epoch checkpoint)."""
        return {name: b.detach().cpu().clone() for name, b in self.model.named_buffers() if b.is_floating_point()}
