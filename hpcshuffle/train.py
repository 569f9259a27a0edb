"""`python -m hpcshuffle.train <overrides>`: data-parallel training over a shuffling plan.

One process per rank (mpiexec / srun). Every rank computes the same plan; local and partial
shuffling train from the node-local store, partial shuffling exchanges samples over MPI during
the epoch, global shuffling reads the shared dataset (or a node replica, storage.replica=true),
locality-aware loading trains on global shuffling's batches from the node-local stores, ranks
lending each other samples over MPI to even out their local batches. With
shuffle.virtual_workers=M, one process trains as synchronous SGD over M workers would
(simulate.py), reading shared storage.
Gradients are averaged with torch.distributed (gloo on CPU, NCCL on GPU) after backward, so the
allreduce is timed on its own. The dataset's format (formats/) decodes samples; the model, the
optimizer and its per-step learning rate come from conf/model and conf/optim (models/, optim.py).

A run directory holding a checkpoint is resumed (checkpoint.py): the plan of the checkpoint's
epoch is recomputed, every store is reconciled to it (stage.py, from peers first), and training
continues at the checkpoint's step. SIGUSR1 / SIGTERM stop all ranks at one iteration, write a
checkpoint and exit with code 75 so that the job script can requeue.
"""

from __future__ import annotations

import fcntl
import json
import os
import pickle
import sys
import time
import traceback
from pathlib import Path

import hydra
import torch
import torch.distributed as dist
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf
from torch import nn
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors
from tqdm import tqdm

from hpcshuffle import chaos, checkpoint, models
from hpcshuffle.analysis.quality import PairMixing
from hpcshuffle.checkpoint import PREEMPT_EXIT_CODE, Preempted, Preemption, RankState, restore_rng, rng_state
from hpcshuffle.config import RunConfig, resolved_yaml
from hpcshuffle.errors import ConfigError
from hpcshuffle.evaluate import Scores
from hpcshuffle.exchange import ExchangeError, Scheduler
from hpcshuffle.formats import get_format
from hpcshuffle.formats.catalog import Catalog, DatasetError
from hpcshuffle.formats.synthetic import GENERATOR_VERSION
from hpcshuffle.loader import EpochOrder, Samples, make_loader
from hpcshuffle.loans import Lender
from hpcshuffle.metrics import TABLE_HEADER, RankEpoch, append_jsonl, drop_epochs_from, reduce_epoch, table_row
from hpcshuffle.node_cache import PlannedCache
from hpcshuffle.optim import build_optimizer, learning_rate, set_learning_rate
from hpcshuffle.plan import EpochPlan, PlanSpec, plan_epochs
from hpcshuffle.plan import FROM_LOAN, FROM_SHARED, FROM_STORE
from hpcshuffle.simulate import (
    WorkerMeanLoss, fold_running_stats, ghost_batch_norm, set_local_batch, split_by_worker, virtual_order,
)
from hpcshuffle.sinks import WandbSink
from hpcshuffle.stage import replica_ids, stage_rank
from hpcshuffle.store import Store, StoreError, rank_dir
from hpcshuffle.world import World, agree, check_same, config_digest, discover, init_torch_distributed, on_all, on_root

RUN_ID_VARIABLE = "HPCSHUFFLE_RUN_ID"
# `${run_id:}` in conf/config.yaml: the launching process's time, shared by every rank and job
OmegaConf.register_new_resolver(
    "run_id", lambda: os.environ.get(RUN_ID_VARIABLE) or time.strftime("%Y-%m-%d_%H-%M-%S"), replace=True
)

USER_ERRORS = (ConfigError, DatasetError, StoreError, ExchangeError)
# absolute, so `python -m hpcshuffle.train` and the `hpcshuffle train` console script find it alike
CONFIG_DIR = str(Path(__file__).resolve().parents[1] / "conf")


def say(world: World, message: str) -> None:
    if world.is_root:
        print(message, flush=True)


# -- setup -------------------------------------------------------------------------------


def prepare_dataset(world: World, config: RunConfig) -> tuple[Catalog, Catalog]:
    """Synthesize the dataset if asked and missing; rank 0 lists it, all ranks get the lists."""
    dataset = config.dataset
    fmt = get_format(dataset.format)

    def listing() -> tuple[Catalog, Catalog]:
        if dataset.synthesize is not None:
            ensure_synthetic(dataset.format, dataset.root, dataset.synthesize, config.seed, config.progress)
        train_split, val_split = fmt.splits
        train = fmt.scan(dataset.root, train_split)
        return train, fmt.scan(dataset.root, val_split)

    train, val = on_root(world, listing, DatasetError, ValueError, OSError)
    missing = None if dataset.root.is_dir() else f"dataset.root {dataset.root} is not readable here"
    agree(world, missing)
    return train, val


def ensure_synthetic(format_name: str, root: Path, spec: dict, seed: int, progress: bool) -> None:
    root.parent.mkdir(parents=True, exist_ok=True)
    with open(root.parent / f".{root.name}.lock", "w") as lock:
        # the runs of a sweep may start at once: one writes the dataset, the others wait and reuse it
        fcntl.flock(lock, fcntl.LOCK_EX)
        marker = root / ".synthetic.json"
        wanted = {"format": format_name, **spec, "seed": seed, "generator": GENERATOR_VERSION}
        if marker.exists():
            # markers written before datasets had formats name none: they were all ImageFolders
            found = {"format": "imagefolder", **json.loads(marker.read_text())}
            if found != wanted:
                raise DatasetError(
                    f"{root} holds a synthetic dataset made with {found}, not {wanted}; "
                    "delete it or point dataset.root elsewhere"
                )
            return
        if root.exists() and any(root.iterdir()):
            raise DatasetError(
                f"{root} exists but is not a complete synthetic dataset; delete it or change dataset.root"
            )
        get_format(format_name).synthesize(root, seed=seed, progress=progress, **spec)
        marker.write_text(json.dumps(wanted))


def open_store(world: World, config: RunConfig, target_ids, catalog: Catalog, plan_key: str, epoch: int) -> Store:
    """Open this rank's store and make it hold exactly `target_ids`, the plan's at `epoch`."""
    store, problem = None, None
    try:
        store = Store(rank_dir(config.local_dir, world.rank))
    except (StoreError, OSError) as err:
        problem = str(err)
    agree(world, problem)
    stage_rank(
        world, store, target_ids, catalog, q=config.q if config.shuffle == "partial" else 0.0,
        threads=config.stage_threads, max_bytes=config.max_bytes, copy=config.stage, progress=config.progress,
        timeout_s=config.exchange_timeout_s,
    )
    store.commit(epoch, plan_key)
    return store


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


def layout(workers: int, processes: int) -> str:
    return f"{workers} virtual workers" if processes < workers else f"{workers} ranks"


# -- the loop ----------------------------------------------------------------------------


class Trainer:
    def __init__(self, world: World, config: RunConfig, run_dir: Path, preemption: Preemption) -> None:
        self.world, self.config, self.run_dir, self.preemption = world, config, run_dir, preemption
        self.device = torch.device(config.device)
        if config.device == "cuda":
            if not torch.cuda.is_available():
                raise ConfigError("device=cuda but no GPU is visible; use device=cpu", collective=True)
            # one GPU per rank on a node (Slurm's --gpus-per-task may leave each rank just one visible)
            self.device = torch.device("cuda", world.local_rank % torch.cuda.device_count())
            torch.cuda.set_device(self.device)
        torch.set_num_threads(config.threads)
        torch.manual_seed(config.seed)
        self.sync = torch.cuda.synchronize if self.device.type == "cuda" else None

        self.virtual = config.virtual_workers  # 0: the workers are this job's ranks
        if self.virtual and world.size > 1:
            raise ConfigError(
                f"shuffle.virtual_workers={self.virtual} trains {self.virtual} workers in one process, but this job "
                f"has {world.size}: start one process (no mpiexec -n) or set shuffle.virtual_workers=0",
                collective=True,
            )
        self.workers = self.virtual or world.size
        self.train_catalog, self.val_catalog = prepare_dataset(world, config)
        try:
            self.spec = PlanSpec(len(self.train_catalog), self.workers, config.batch_size, config.q, config.seed)
        except ValueError as err:
            raise ConfigError(str(err), collective=True) from err
        self.plan_key = config_digest(
            f"{self.train_catalog.fingerprint()} {self.spec} {config.shuffle}"
        )
        self.identity = {
            "shuffle": config.shuffle, "num_samples": self.spec.num_samples, "num_ranks": self.workers,
            "processes": world.size,
            "batch_size": config.batch_size, "q": config.q, "seed": config.seed,
            "dataset": self.train_catalog.fingerprint(),
        }
        resumed = self.find_checkpoint()
        self.start_epoch, self.start_step = (resumed["epoch"], resumed["step"]) if resumed else (0, 0)
        self.plans = plan_epochs(self.spec, config.shuffle, config.epochs, self.start_epoch)
        self.first_plan = next(self.plans)

        self.store = None  # this rank's partition (local, partial)
        self.replica = None  # this rank's share of its node's full replica (global, storage.replica)
        store_roots = None  # None: read shared storage (virtual workers always: they simulate training, not I/O)
        if config.shuffle != "global" and not self.virtual:
            self.store = open_store(
                world, config, self.first_plan.held[world.rank], self.train_catalog, self.plan_key, self.start_epoch
            )
            store_roots = [self.store.root]
        elif config.replica:
            share = replica_ids(self.spec.num_samples, world.local_rank, world.local_size)
            self.replica = open_store(world, config, share, self.train_catalog, self.plan_key, self.start_epoch)
            store_roots = [rank_dir(config.local_dir, rank) for rank in world.node_ranks]
        self.reads_local = store_roots is not None
        self.scheduler = Scheduler(world.comm, self.store, self.plan_key, config.exchange_timeout_s) if self.store is not None else None
        self.lender = None
        if config.shuffle == "locality" and not self.virtual:
            # a loan must be sent before the loader asks for it: cover the DataLoader's look-ahead
            # (2 batches per worker process) and the batch being assembled
            ahead = max(config.loan_ahead, 2 * config.loader_workers + 2)
            self.lender = Lender(world.comm, self.store, ahead, config.exchange_timeout_s)

        self.cache = None  # planned cache of shared-storage reads (shuffle=global)
        if config.cache_policy != "none":
            capacity = config.cache_samples or max(1, self.spec.max_share // 4)
            self.cache = on_all(world, lambda: PlannedCache(
                rank_dir(config.local_dir, world.rank) / "cache", self.spec, config.cache_policy, capacity,
                config.epochs, world.rank, self.start_epoch, self.start_step,
            ), OSError)
            say(world, f"cache: {config.cache_policy}, {capacity} samples per rank under {config.local_dir}; "
                       f"rank 0's planned hit ratio {self.cache.planned_hit_ratio:.3f} "
                       f"(planned in {self.cache.planning_s:.1f} s)")

        self.codec = on_all(world, lambda: get_format(config.dataset.format).codec(
            config.dataset.root, self.train_catalog, config.dataset.options), DatasetError, ValueError, OSError)
        init_torch_distributed(world, "nccl" if self.device.type == "cuda" else "gloo")
        self.memory_format = torch.channels_last if config.channels_last else torch.contiguous_format
        self.model = self.build_model()
        self.optimizer = build_optimizer(self.model, config.optim)
        self.global_batch = config.batch_size * self.workers
        self.loss_fn = self.build_loss()
        self.mixing = None  # shuffle quality (analysis/quality.py), computed on rank 0
        if world.is_root:
            self.mixing = PairMixing(self.spec.num_samples, self.workers, seed=config.seed)
            for past in plan_epochs(self.spec, config.shuffle, self.start_epoch):  # a resumed run's earlier epochs
                self.mixing.add_epoch(past.order)
        self.bf16 = config.precision == "bf16"
        self.sink = WandbSink(run_dir, config, world) if config.wandb and world.is_root else None
        self.carried: RankState | None = None  # the interrupted epoch's progress, when resuming inside one
        if resumed:
            self.restore(resumed)

        self.order = EpochOrder()
        self.train_loader = make_loader(
            Samples(self.train_catalog, self.codec, store_roots, train=True, seed=config.seed, on_error=config.on_error,
                    io_threads=config.io_threads, decode_threads=config.decode_threads,
                    cache_dir=self.cache.root if self.cache else None),
            self.order, self.global_batch if self.virtual else config.batch_size, config.loader_workers,
            pin_memory=self.device.type == "cuda",
        )
        val_order = EpochOrder()
        val_order.set_order(torch.arange(world.rank, len(self.val_catalog), world.size).numpy())
        self.val_loader = make_loader(
            Samples(self.val_catalog, self.codec, None, train=False, on_error=config.on_error,
                    io_threads=config.io_threads, decode_threads=config.decode_threads), val_order,
            2 * config.batch_size, config.loader_workers, pin_memory=self.device.type == "cuda",
        )

    def build_model(self) -> nn.Module:
        options = dict(self.config.model_options)
        weights = options.pop("weights", None)  # a local state dict to start from (fine-tuning)
        try:
            model = models.build(self.config.model, num_classes=self.codec.num_classes,
                                 in_channels=self.codec.in_channels, **options)
        except ValueError as err:
            raise ConfigError(str(err), collective=True) from err
        if weights is not None:
            on_root(self.world, lambda: load_weights(model, Path(weights)), ConfigError, OSError)
        if self.virtual:
            replaced = ghost_batch_norm(model, self.config.batch_size)
            say(self.world, f"virtual workers: {self.virtual}, {replaced} BatchNorm layers normalise each worker's "
                            f"local batch of {self.config.batch_size}")
        model = model.to(self.device, memory_format=self.memory_format)
        for tensor in list(model.parameters()) + list(model.buffers()):
            dist.broadcast(tensor.data, src=0)  # every rank starts from rank 0's initial weights
        return model

    def build_loss(self) -> nn.Module:
        weights = self.config.dataset.class_weights
        if weights is not None and len(weights) != self.codec.num_classes:
            raise ConfigError(f"dataset.class_weights has {len(weights)} entries for {self.codec.num_classes} classes",
                              collective=True)
        weight = None if weights is None else torch.tensor(weights, device=self.device)
        smoothing = self.config.label_smoothing if self.codec.task == "classify" else 0.0
        if self.virtual:
            per_element = nn.CrossEntropyLoss(weight=weight, label_smoothing=smoothing, reduction="none")
            return WorkerMeanLoss(per_element, weight, self.config.batch_size, self.virtual)
        return nn.CrossEntropyLoss(weight=weight, label_smoothing=smoothing)

    def to_device(self, inputs: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        inputs = inputs.to(self.device, non_blocking=True, memory_format=self.memory_format)
        return inputs, targets.to(self.device, non_blocking=True)

    def forward_backward(self, images: torch.Tensor, labels: torch.Tensor) -> float:
        """Gradients of the batch's loss; returns the loss. Virtual workers' batches go through
        `virtual_chunk` workers at a time."""
        size = len(images)
        if self.virtual:
            local = size // self.virtual
            set_local_batch(self.model, self.loss_fn, local)
            size = local * (self.config.virtual_chunk or self.virtual)
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

    def run(self) -> None:
        config, world = self.config, self.world
        workers = f"{self.virtual} virtual workers in one process" if self.virtual else f"{world.size} ranks"
        say(world, f"{config.shuffle} shuffling (q={config.q}), {workers}, N={self.spec.num_samples}, "
                    f"b={config.batch_size}, {self.spec.iterations} iterations/epoch -> {self.run_dir}")
        say(world, TABLE_HEADER)
        for epoch in range(self.start_epoch, config.epochs):
            plan = self.first_plan if epoch == self.start_epoch else next(self.plans)
            first_step = self.start_step if epoch == self.start_epoch else 0
            row, trained, held, stopped = self.train_epoch(plan, first_step)
            if stopped is not None:
                path = self.save_checkpoint(epoch, stopped, row, trained)
                signals = self.world.comm.gather(self.preemption.signalled, root=0) or []
                got = ", ".join(f"{name} on rank {rank}" for rank, name in enumerate(signals) if name)
                raise Preempted(
                    f"stopped at epoch {epoch}, step {stopped} on request ({got}); checkpoint {path}; "
                    "run the same command again (same run directory) to continue, as jobs/train.sbatch "
                    "does after requeueing"
                )
            self.record(plan, row, trained, held, self.validate())
            chaos.point(world.rank, epoch, "before_checkpoint")
            every = config.checkpoint_every_epochs
            if every and ((epoch + 1) % every == 0 or epoch + 1 == config.epochs):
                self.save_checkpoint(epoch + 1, 0)

    def train_epoch(self, plan: EpochPlan, first_step: int) -> tuple[RankEpoch, list[int], list[int], int | None]:
        """Train on this rank's order of `plan` from iteration `first_step`.

        Returns the counters, the ids trained on, the ids held at the start, and the iteration
        at which a preemption stopped the epoch (None when it ran to its end).
        """
        rank, row, trained = self.world.rank, RankEpoch(), []
        if self.carried is not None:
            row, trained, self.carried = self.carried.row, self.carried.trained, None
        held = sorted(self.store.ids()) if self.store is not None else []
        if self.store is not None and held != plan.held[rank].tolist():
            diff = self.store.verify(plan.held[rank])
            raise StoreError(
                f"rank {rank}'s store does not hold what epoch {plan.epoch}'s plan says: "
                f"{len(diff.missing)} missing (e.g. {diff.missing[:5]}), {len(diff.extra)} extra "
                f"(e.g. {diff.extra[:5]}); was {self.store.root} changed by another job?"
            )
        batch_size = self.config.batch_size
        sources = None
        if self.lender:
            sources = plan.sources(rank)
            lent_per_step = plan.loans.lent_per_step(rank, self.spec.iterations)
            self.lender.start_epoch(plan, first_step)
        if self.virtual:
            held = [ids.tolist() for ids in plan.held]  # every virtual worker's, from the plan
            self.order.set_order(virtual_order(plan, first_step), plan.epoch)
        else:
            self.order.set_order(
                plan.order[rank][first_step * batch_size :], plan.epoch,
                sources=None if sources is None else sources[first_step * batch_size :],
                borrow=self.lender.borrowed if self.lender else None, first_step=first_step, batch_size=batch_size,
                cache=self.cache.decisions(plan.epoch, first_step) if self.cache else None,
            )
        self.model.train()
        stopped, every_steps = None, self.config.checkpoint_every_steps
        with row.phase("epoch", self.sync):
            if self.scheduler:
                with row.phase("exchange"):
                    self.scheduler.scheduling(plan)
            batches = iter(self.train_loader)
            progress = tqdm(range(first_step, self.spec.iterations), desc=f"epoch {plan.epoch}", leave=False,
                            disable=not (self.config.progress and self.world.is_root))
            for iteration in progress:
                if self.preemption.poll():
                    stopped = iteration
                    break
                if every_steps and iteration > first_step and iteration % every_steps == 0:
                    self.save_checkpoint(plan.epoch, iteration, row, trained)
                chaos.point(rank, plan.epoch, f"iteration-{iteration}")
                row.lr = learning_rate(self.config.optim, self.global_batch, plan.epoch * self.spec.iterations + iteration,
                                       self.spec.iterations, self.config.epochs)
                set_learning_rate(self.optimizer, row.lr)
                waited = self.lender.wait_s if self.lender else 0.0
                with row.phase("io"):
                    images, labels, sample_ids, skipped = next(batches)
                    if self.cache:
                        self.cache.evict(plan.epoch, iteration)  # the batch is read: its evictions are due
                        row.samples["read_cache"] += self.cache.hits(plan.epoch, iteration)
                if self.lender:
                    # waiting for borrowed samples is exchange time, not reading
                    waited = self.lender.wait_s - waited
                    row.seconds["io"] -= waited
                    row.seconds["exchange"] += waited
                    with row.phase("exchange"):
                        self.lender.post(iteration)  # overlap: send loans of the coming steps during FW/BW
                    # counted per step trained, so a resumed epoch counts each loan once
                    batch_sources = sources[iteration * batch_size : (iteration + 1) * batch_size]
                    row.samples["read_local"] += int((batch_sources == FROM_STORE).sum())
                    row.samples["read_shared"] += int((batch_sources == FROM_SHARED).sum())
                    row.samples["received"] += int((batch_sources == FROM_LOAN).sum())
                    row.samples["sent"] += int(lent_per_step[iteration])
                if self.scheduler:
                    # overlap: post this iteration's q·b sends before FW so they progress during FW/BW
                    with row.phase("exchange"):
                        self.scheduler.communicate(iteration)
                with row.phase("fwbw", self.sync):
                    self.optimizer.zero_grad(set_to_none=True)
                    if images is None:  # every sample of the batch was unreadable and skipped
                        for parameter in self.model.parameters():
                            parameter.grad = torch.zeros_like(parameter)  # still join the allreduce
                        row.step_losses.append(None)
                    else:
                        loss = self.forward_backward(*self.to_device(images, labels))
                        row.loss_sum += loss
                        row.step_losses.append(loss)
                with row.phase("allreduce", self.sync):
                    average_gradients(self.model, self.world.size)
                    self.optimizer.step()
                row.iterations += 1
                row.samples["skipped"] += skipped
                trained += sample_ids.tolist()
            if self.scheduler:
                with row.phase("exchange"):
                    if stopped is not None:
                        self.scheduler.abandon()
                    else:
                        self.scheduler.synchronize()
                        row.samples["store_peak"] = len(self.store)
                        self.scheduler.clean_local_storage()
            if self.lender:
                with row.phase("exchange"):
                    if stopped is not None:
                        self.lender.abandon()
                    else:
                        self.lender.finish()
        if not self.lender:
            reads = len(trained) - row.samples["read_cache"]
            row.samples["read_local" if self.reads_local else "read_shared"] = reads
        if self.scheduler and not self.lender:
            row.samples["sent"] = self.scheduler.traffic.sent
            row.samples["received"] = self.scheduler.traffic.received
        elif self.replica is not None:
            row.samples["store_peak"] = len(self.replica)
        return row, trained, held, stopped

    # -- checkpoints ---------------------------------------------------------------------

    def find_checkpoint(self) -> dict | None:
        """Collective: the run directory's checkpoint if there is one (and it fits this run)."""
        config, world = self.config, self.world

        def read() -> dict | None:
            found = checkpoint.load(self.run_dir)
            if found is None:
                if config.resume == "require":
                    raise ConfigError(
                        f"checkpoint.resume=require but {self.run_dir} holds no {checkpoint.FILE}; pass "
                        "the run directory of the interrupted run as hydra.run.dir"
                    )
                return None
            checkpoint.check_resumable(found, self.identity, config.epochs, self.run_dir)
            for name in ("metrics.jsonl", "audit.jsonl"):  # records the resumed run writes again
                dropped = drop_epochs_from(self.run_dir / name, found["epoch"])
                if dropped:
                    print(f"resume: dropped {dropped} records of epoch {found['epoch']} on from {name}", flush=True)
            return found

        found = on_root(world, read, ConfigError)
        if found is None:
            return None
        saved_ranks = found["plan"]["num_ranks"]
        say(world, f"resume: {self.run_dir / checkpoint.FILE} at epoch {found['epoch']}, step {found['step']} "
                   f"(written by {saved_ranks} workers)")
        if not self.same_layout(found):
            now, then = layout(self.workers, world.size), layout(saved_ranks, found["plan"].get("processes", saved_ranks))
            say(world, f"resume: {now} instead of {then}: re-planned for {self.workers} workers; each store "
                       f"is restaged to the new plan's epoch {found['epoch']} partition, "
                       "from other ranks' stores first, then from shared storage")
            if found["step"]:
                say(world, f"resume: the checkpoint is inside epoch {found['epoch']}; the old workers' progress "
                           "through it does not carry over to new ones, so the epoch restarts from step 0 with "
                           "the checkpoint's weights")
                found["step"] = 0
        return found

    def same_layout(self, found: dict) -> bool:
        """Whether the checkpoint's run had these workers in these processes (virtual or real ranks)."""
        saved = found["plan"]
        return (saved["num_ranks"], saved.get("processes", saved["num_ranks"])) == (self.workers, self.world.size)

    def restore(self, found: dict) -> None:
        self.model.load_state_dict(found["model"])
        self.optimizer.load_state_dict(found["optimizer"])
        if self.same_layout(found):
            state: RankState = found["ranks"][self.world.rank]
            restore_rng(state.rng)
            if found["step"]:
                self.carried = state
                self.model.load_state_dict(state.buffers, strict=False)

    def save_checkpoint(self, epoch: int, step: int, row: RankEpoch | None = None, trained=()) -> Path:
        """Collective: rank 0 writes where training continues (epoch, step) and everything it needs."""
        state = RankState(rng_state())
        if step:
            buffers = {name: b.detach().cpu().clone() for name, b in self.model.named_buffers() if b.is_floating_point()}
            state = RankState(state.rng, row, list(trained), buffers)
        states = self.world.comm.gather(state, root=0)
        path = self.run_dir / checkpoint.FILE
        if self.world.is_root:
            checkpoint.save(self.run_dir, {
                "epoch": epoch, "step": step, "plan": self.identity,
                "model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(), "ranks": states,
            })
        return path

    @torch.no_grad()
    def validate(self) -> dict[str, float]:
        average_buffers(self.model, self.world.size)
        self.model.eval()
        scores = Scores(self.codec.task, self.codec.num_classes, self.device)
        for images, labels, _, _ in self.val_loader:
            if images is None:
                continue
            images, labels = self.to_device(images, labels)
            with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16):
                logits = self.model(images)
            scores.add(logits.float(), labels)
        dist.all_reduce(scores.counts)  # on the device: NCCL reduces GPU tensors only
        return scores.summary()

    def record(self, plan: EpochPlan, row: RankEpoch, trained: list[int], held: list[int], scores: dict) -> None:
        rows = self.world.comm.gather(row, root=0)
        audits = self.world.comm.gather((held, trained), root=0) if self.config.audit else None
        if not self.world.is_root:
            return
        if audits is not None and self.virtual:
            audits = list(zip(held, split_by_worker(trained, self.spec)))
        record = {
            "epoch": plan.epoch,
            "shuffle": self.config.shuffle,
            "q": self.config.q,
            "workers": self.workers,
            "batch_size": self.config.batch_size,
            "num_samples": self.spec.num_samples,
            "iterations": self.spec.iterations,
            "lr": row.lr,
            **scores,
            **reduce_epoch(rows, self.config.step_loss),
            "mixing": self.mixing.add_epoch(plan.order),
        }
        if self.virtual:
            record["virtual_workers"] = True
        if self.cache:
            hits, reads = record["samples"]["read_cache"], record["samples"]["read_shared"]
            record["cache"] = {"policy": self.config.cache_policy, "samples": self.cache.capacity,
                               "hit_ratio": hits / max(hits + reads, 1)}
        append_jsonl(self.run_dir / "metrics.jsonl", record)
        if audits is not None:
            for rank, (held_ids, trained_ids) in enumerate(audits):
                append_jsonl(
                    self.run_dir / "audit.jsonl",
                    {"epoch": plan.epoch, "rank": rank, "held": held_ids, "trained": trained_ids},
                )
        print(table_row(record), flush=True)
        if self.sink:
            self.sink.log(record)

    def close(self) -> None:
        if self.sink:
            self.sink.close()
        for user in (self.scheduler, self.lender, self.cache):
            if user is not None:
                user.close()
        for store in (self.store, self.replica):
            if store is not None:
                store.close()
        if dist.is_initialized():
            dist.destroy_process_group()


# -- entry points ------------------------------------------------------------------------


def fail(world: World, err: BaseException) -> None:
    """Report an error and end this rank without leaving the others hanging."""
    collective = getattr(err, "collective", False)
    if isinstance(err, Preempted):
        if world.is_root:
            print(f"hpcshuffle: {err}", file=sys.stderr, flush=True)
        sys.exit(PREEMPT_EXIT_CODE)
    if isinstance(err, USER_ERRORS):
        if world.is_root or not collective:
            where = "" if collective else f" on rank {world.rank}"
            print(f"hpcshuffle: error{where}: {err}", file=sys.stderr, flush=True)
        code = 2
    else:
        traceback.print_exc()
        code = 1
    if world.size > 1 and not collective:
        world.comm.Abort(code)  # the other ranks may be waiting in a collective: end them too
    if os.environ.get("SUBMITIT_EXECUTOR"):
        # a job of a Slurm sweep (hydra/launcher=slurm): submitit reports a raised error as the
        # job's result; after an exit it would have none and, without sacct, wait for one forever
        raise RuntimeError(f"hpcshuffle: {err}") from None
    sys.exit(code)


def run(cfg: DictConfig, world: World, run_dir: Path) -> None:
    # compare configs first: every later check then fails on all ranks alike or on none
    yaml_text = resolved_yaml(cfg)
    check_same(world, "the resolved config", config_digest(yaml_text))
    try:
        config = RunConfig.from_hydra(cfg)
    except ConfigError as err:
        raise ConfigError(str(err), collective=True) from err
    if world.is_root:
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "config.yaml").write_text(yaml_text)
    preemption = Preemption(world.comm)  # from here on, SIGUSR1 / SIGTERM stop the run cleanly
    trainer = Trainer(world, config, run_dir, preemption)
    try:
        trainer.run()
    finally:
        trainer.close()
    # only after a clean end: a rank that failed alone must not wait on the others' flag
    # allreduce (they may be blocked elsewhere); it ends through MPI_Abort instead
    preemption.close()


@hydra.main(version_base="1.3", config_path=CONFIG_DIR, config_name="config")
def hydra_main(cfg: DictConfig) -> None:
    world = discover()
    try:
        run(cfg, world, Path(HydraConfig.get().runtime.output_dir))
    except (Exception, KeyboardInterrupt) as err:  # noqa: BLE001 - every failure must end all ranks
        fail(world, err)


def main() -> None:
    try:
        world = discover()
    except ConfigError as err:
        print(f"hpcshuffle: error: {err}", file=sys.stderr, flush=True)
        sys.exit(2)
    # every rank must name the run directory alike: rank 0's clock decides
    run_id = world.comm.bcast(time.strftime("%Y-%m-%d_%H-%M-%S") if world.is_root else None, root=0)
    # jobs a launcher starts elsewhere (submitit on Slurm) inherit it, so they resolve the same dirs
    os.environ.setdefault(RUN_ID_VARIABLE, run_id)
    hydra_main()


if __name__ == "__main__":
    # run the module's importable copy, not __main__'s: a launcher on Slurm (submitit) then
    # pickles the task function by reference instead of trying to pickle this whole module
    from hpcshuffle.train import main as importable_main

    importable_main()
