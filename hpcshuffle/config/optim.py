"""`conf/optim/`: the optimizer and learning-rate schedule a run asks for, typed and checked.

The optimizers and schedules themselves are built in training/optim.py (torch); this module holds
only what a config says, so parsing a run's config needs no torch.
"""

from __future__ import annotations

from dataclasses import dataclass

OPTIMIZERS = ("sgd", "lars", "lamb")
SCHEDULES = ("constant", "step", "cosine", "poly")


@dataclass
class OptimConfig:
    """`conf/optim/*.yaml`, typed.

    Attributes:
        lr: the base learning rate; with `reference_batch` set, the rate at that global batch.
        reference_batch: scale `lr` by global batch / reference_batch (Goyal et al.: 256);
            None uses `lr` as given.
        schedule: constant | step (× gamma at each milestone) | cosine | poly (power 2).
        warmup / milestones: in `unit`s ("epoch" or "step", MLPerf-HPC counts steps).
        no_decay_1d: no weight decay on biases and normalization weights (LARS/LAMB practice).
    """

    name: str = "sgd"
    lr: float = 0.1
    reference_batch: int | None = None
    momentum: float = 0.9
    nesterov: bool = False
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-6
    trust_coefficient: float = 0.001
    no_decay_1d: bool = False
    schedule: str = "constant"
    unit: str = "epoch"
    warmup: float = 0.0
    milestones: tuple[float, ...] = ()
    gamma: float = 0.1

    def __post_init__(self) -> None:
        if self.name not in OPTIMIZERS:
            raise ValueError(f"optim.name must be one of {OPTIMIZERS}, got {self.name!r}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"optim.schedule must be one of {SCHEDULES}, got {self.schedule!r}")
        if self.unit not in ("epoch", "step"):
            raise ValueError(f"optim.unit must be 'epoch' or 'step', got {self.unit!r}")
        if self.lr <= 0:
            raise ValueError(f"optim.lr must be > 0, got {self.lr}")
        if self.reference_batch is not None and self.reference_batch < 1:
            raise ValueError(f"optim.reference_batch must be >= 1 or null, got {self.reference_batch}")
        if self.warmup < 0 or self.weight_decay < 0:
            raise ValueError(f"optim.warmup and optim.weight_decay must be >= 0, got {self.warmup}, {self.weight_decay}")
        if list(self.milestones) != sorted(self.milestones):
            raise ValueError(f"optim.milestones must increase, got {list(self.milestones)}")

    def peak_lr(self, global_batch: int) -> float:
        """The learning rate after warm-up (linear scaling rule when reference_batch is set)."""
        return self.lr * (global_batch / self.reference_batch if self.reference_batch else 1.0)
