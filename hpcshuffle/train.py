"""`python -m hpcshuffle.train <overrides>`: data-parallel training over a shuffling plan.

One process per rank (mpiexec / srun). Parse the Hydra config into a typed `RunConfig`, build the
parts — the plan, the strategy's data path (datapath/), the learner (model, optimizer, allreduce),
the checkpointer — then train epoch by epoch as the plan says, and close. The loop calls the data
path's interface and knows no strategy. A run directory holding a checkpoint is resumed
(checkpoint.py); SIGUSR1 / SIGTERM stop all ranks at one iteration, write a checkpoint and exit
with code 75 so that the job script can requeue. A peer that stops answering for world.timeout_s
(comm/peers.py) ends the job with code 76, which the job script requeues on as well.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import asdict
from pathlib import Path

import hydra
import torch
import torch.distributed as dist
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf
from tqdm import tqdm

from hpcshuffle.analysis.labels import shuffle_quality
from hpcshuffle.comm import chaos
from hpcshuffle.comm.peers import Peers
from hpcshuffle.comm.world import (
    World,
    check_same,
    config_digest,
    discover,
    init_torch_distributed,
    leave_at_once,
)
from hpcshuffle.config import RunConfig, resolved_yaml
from hpcshuffle.datapath import RunContext, build_data_path
from hpcshuffle.datapath.virtual import virtual_workers
from hpcshuffle.errors import ConfigError
from hpcshuffle.plan import EpochPlan
from hpcshuffle.staging.dataset import prepare_dataset
from hpcshuffle.storage.loader import validation_loader
from hpcshuffle.storage.shards import shard_summary
from hpcshuffle.storage.shared_io import describe
from hpcshuffle.training.checkpoint import Checkpointer, Preemption, RankState
from hpcshuffle.training.failure import fail
from hpcshuffle.training.learner import Learner, pick_device
from hpcshuffle.training.metrics import TABLE_HEADER, RankEpoch, reduce_epoch
from hpcshuffle.training.optim import learning_rate
from hpcshuffle.training.run import (
    open_codec,
    plan_spec,
    replay_plans,
    run_identity,
)
from hpcshuffle.training.sinks import WandbSink, write_epoch

RUN_ID_VARIABLE = "HPCSHUFFLE_RUN_ID"
# `${run_id:}` in conf/config.yaml: the launching process's time, shared by every rank and job
OmegaConf.register_new_resolver(
    "run_id", lambda: os.environ.get(RUN_ID_VARIABLE) or time.strftime("%Y-%m-%d_%H-%M-%S"), replace=True
)
# absolute, so `python -m hpcshuffle.train` and the `hpcshuffle train` console script find it alike
CONFIG_DIR = str(Path(__file__).resolve().parents[1] / "conf")


def say(world: World, message: str) -> None:
    """Print `message` on rank 0."""
    if world.is_root:
        print(message, flush=True)


class Trainer:
    """Builds a run's parts from its config, then trains epoch by epoch as the plan says."""

    def __init__(self, world: World, config: RunConfig, run_dir: Path, preemption: Preemption) -> None:
        self.world, self.config, self.run_dir, self.preemption = world, config, run_dir, preemption
        device = pick_device(config, world)
        torch.set_num_threads(config.threads)
        torch.manual_seed(config.seed)
        virtual = virtual_workers(config, world)  # 0: the workers are this job's ranks
        self.workers = virtual or world.size
        train_catalog, val_catalog = prepare_dataset(world, config)
        self.shared = describe(train_catalog) if world.is_root else None  # for rank 0's metrics.jsonl
        self.spec = plan_spec(world, config, train_catalog, self.workers)
        self.scope = "node" if self.spec.ranks_per_node > 1 else "rank"
        sharded = config.shuffle.unit == "shard" and world.is_root
        self.shard_note = shard_summary(self.spec, train_catalog) if sharded else ""
        identity = run_identity(world, config, self.spec, train_catalog)
        self.checkpointer = Checkpointer(world, run_dir, identity, config.checkpoint.resume, config.epochs)
        resumed = self.checkpointer.find()
        self.start_epoch, self.start_step = (resumed["epoch"], resumed["step"]) if resumed else (0, 0)
        self.quality = shuffle_quality(config.dataset.format, train_catalog.labels, self.spec) if world.is_root else None
        self.plans = replay_plans(self.spec, config.shuffle.name, config.epochs, self.start_epoch,
                                  self.quality.mixing.add_epoch if self.quality else None)
        first_plan = self.first_plan = next(self.plans)
        codec = open_codec(world, config, train_catalog)
        plan_key = config_digest(f"{train_catalog.fingerprint()} {self.spec} {config.shuffle.name}")
        self.data = build_data_path(RunContext(
            world, config, self.spec, train_catalog, codec, plan_key, first_plan, self.start_step, device,
        ))
        init_torch_distributed(world, "nccl" if device.type == "cuda" else "gloo", config.world.timeout_s)
        self.peers = Peers(world, config.world.timeout_s, run_dir)
        self.learner = Learner(config, world, codec, device, virtual, self.peers)
        self.global_batch = config.batch_size * self.workers
        self.sink = None
        if config.logger.wandb and world.is_root:
            self.sink = WandbSink(run_dir, config.logger.project, dict(asdict(config), workers=world.size))
        self.carried: RankState | None = None  # the interrupted epoch's progress, when resuming inside one
        if resumed:
            self.carried = self.checkpointer.restore(resumed, self.learner.model, self.learner.optimizer)
        self.val_loader = validation_loader(val_catalog, codec, world.rank, world.size, 2 * config.batch_size,
                                            config.loader, pin_memory=device.type == "cuda")

    def run(self) -> None:
        """Train from the start (or resumed) epoch to `epochs`: each epoch trained, validated, recorded
        and checkpointed as checkpoint.every_epochs says. A preemption checkpoints where every rank
        stopped and raises Preempted."""
        config, world = self.config, self.world
        workers = f"{self.workers} virtual workers in one process" if world.size < self.workers else f"{world.size} ranks"
        nodes = f"{self.spec.nodes} nodes × {self.spec.ranks_per_node} ranks" if self.scope == "node" else "one per rank"
        say(world, f"{config.shuffle.name} shuffling (q={config.shuffle.q}), {workers}, storage.scope={self.scope} "
                   f"(partitions: {nodes}), N={self.spec.num_samples}, "
                   f"b={config.batch_size}, {self.spec.iterations} iterations/epoch -> {self.run_dir}")
        if self.shard_note:
            say(world, self.shard_note)
        say(world, TABLE_HEADER)
        for epoch in range(self.start_epoch, config.epochs):
            plan = self.first_plan if epoch == self.start_epoch else next(self.plans)
            first_step = self.start_step if epoch == self.start_epoch else 0
            row, trained, stopped = self.train_epoch(plan, first_step)
            if stopped is not None:
                path = self.save_checkpoint(epoch, stopped, row, trained)
                raise self.preemption.stopped(epoch, stopped, path)
            self.peers.at(epoch)
            self.record(plan, row, trained, self.learner.validate(self.val_loader))
            chaos.point(world.rank, epoch, "before_checkpoint")
            every = config.checkpoint.every_epochs
            if every and ((epoch + 1) % every == 0 or epoch + 1 == config.epochs):
                self.save_checkpoint(epoch + 1, 0)

    def train_epoch(self, plan: EpochPlan, first_step: int) -> tuple[RankEpoch, list[int], int | None]:
        """Train on this rank's part of `plan` from iteration `first_step` (Fig. 3's loop).

        Returns the counters, the ids trained on, and the iteration at which a preemption stopped
        the epoch (None when it ran to its end).
        """
        row, trained = RankEpoch(started_at=time.time()), []
        if self.carried is not None:
            row, trained, self.carried = self.carried.row, self.carried.trained, None
        learner, every_steps, stopped = self.learner, self.config.checkpoint.every_steps, None
        with row.phase("epoch", learner.sync):
            self.data.start_epoch(plan, first_step, row)
            batches = self.data.batches()
            steps = tqdm(range(first_step, self.spec.iterations), desc=f"epoch {plan.epoch}", leave=False,
                         disable=not (self.config.progress and self.world.is_root))
            for step in steps:
                self.peers.at(plan.epoch, step)
                if self.preemption.poll():
                    stopped = step
                    break
                if every_steps and step > first_step and step % every_steps == 0:
                    self.save_checkpoint(plan.epoch, step, row, trained)
                chaos.point(self.world.rank, plan.epoch, f"iteration-{step}")
                row.lr = learning_rate(self.config.optim, self.global_batch, plan.epoch * self.spec.iterations + step,
                                       self.spec.iterations, self.config.epochs)
                learner.set_learning_rate(row.lr)
                waited = row.seconds["io"]
                with row.phase("io"):
                    images, labels, sample_ids, skipped = next(batches)
                if step == 0:
                    row.first_io = row.seconds["io"] - waited
                sample_ids = sample_ids.tolist()
                self.data.before_step(step, row, sample_ids)
                with row.phase("fwbw", learner.sync):
                    loss = learner.forward_backward(images, labels)
                row.loss_sum += loss or 0.0
                row.step_losses.append(loss)
                with row.phase("allreduce", learner.sync):
                    learner.allreduce_and_step()
                row.iterations += 1
                row.samples["skipped"] += skipped
                trained += sample_ids
            self.data.end_epoch(stopped, row)
        return row, trained, stopped

    def save_checkpoint(self, epoch: int, step: int, row: RankEpoch | None = None, trained=()) -> Path:
        """Collective: write the checkpoint of training continuing at (`epoch`, `step`); inside an epoch
        with its counters, the ids trained so far and each rank's BatchNorm statistics."""
        learner = self.learner
        buffers = learner.rank_buffers() if step else None
        return self.checkpointer.save(epoch, step, learner.model, learner.optimizer, row, trained, buffers)

    def record(self, plan: EpochPlan, row: RankEpoch, trained: list[int], scores: dict) -> None:
        """Rank 0 writes the epoch's metrics.jsonl record (and audit rows), prints and logs it."""
        rows = self.world.comm.gather(row, root=0)
        audits = self.world.comm.gather(self.data.audit(trained), root=0) if self.config.audit else None
        if not self.world.is_root:
            return
        config = self.config
        record = {
            "epoch": plan.epoch, "shuffle": config.shuffle.name, "q": config.shuffle.q, "workers": self.workers,
            "scope": self.scope, "ranks_per_node": self.spec.ranks_per_node, "partition": self.spec.partition,
            "shard_samples": self.spec.shard_samples, "shuffle_buffer": self.spec.shuffle_buffer,
            "batch_size": config.batch_size, "num_samples": self.spec.num_samples,
            "iterations": self.spec.iterations, "lr": row.lr,
            **scores,
            **reduce_epoch(rows, config.logger.step_loss),
            "mixing": self.quality.add_epoch(plan.order), "shared": self.shared,
            "hosts": self.peers.hosts,  # rank r ran on hosts[r]
        }
        if self.world.size < self.workers:
            record["virtual_workers"] = True
        record.update(self.data.record_extras(record["samples"]))
        write_epoch(self.run_dir, record, audits, self.sink)

    def close(self) -> None:
        """Finish the wandb run, close the data path and the peers' roll-call directory, and end torch.distributed."""
        if self.sink:
            self.sink.close()
        self.data.close()
        self.peers.close()
        if dist.is_initialized():
            dist.destroy_process_group()


def run(cfg: DictConfig, world: World, run_dir: Path) -> None:
    """Collective: one training run of `cfg` into `run_dir`, from config checks to the last epoch.

    Ranks first agree on the resolved config (storage.local_dir may differ); rank 0 writes it to
    `run_dir/config.yaml`. A collective error closes the run on every rank before it is raised; a
    rank failing alone raises at once, for `fail` to abort the job.
    """
    # compare configs first: every later check then fails on all ranks alike or on none
    yaml_text = resolved_yaml(cfg)
    # node-local paths may differ between nodes (a per-node $TMPDIR); ranks that must share one say so
    check_same(world, "the resolved config", config_digest(resolved_yaml(cfg, leave_out=("storage", "local_dir"))))
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
    except BaseException as err:
        # a rank failing alone is ended with MPI_Abort (fail()); closing first would tear down
        # the process group under peers still in a collective with it, and they would fail too
        if getattr(err, "collective", False) or world.size == 1:
            trainer.close()
        raise
    trainer.close()
    # only after a clean end: a rank that failed alone must not wait on the others' flag
    # allreduce (they may be blocked elsewhere); it ends through MPI_Abort instead
    preemption.close()


@hydra.main(version_base="1.3", config_path=CONFIG_DIR, config_name="config")
def hydra_main(cfg: DictConfig) -> None:
    """Hydra's entry point: run the composed config in Hydra's output directory; any failure ends
    every rank through `fail` (exit codes in training/failure.py)."""
    world = discover()
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    try:
        run(cfg, world, run_dir)
    except (Exception, KeyboardInterrupt) as err:  # noqa: BLE001 - every failure must end all ranks
        fail(world, err, run_dir)


def main() -> None:
    """`hpcshuffle train` / `python -m hpcshuffle.train`: find this rank's place in the job (exit 2 on a
    launch that cannot work), agree on rank 0's run id for the run directory, and start Hydra."""
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
    leave_at_once()  # a failed run has exited inside hydra_main with its code


if __name__ == "__main__":
    # run the module's importable copy, not __main__'s: a launcher on Slurm (submitit) then
    # pickles the task function by reference instead of trying to pickle this whole module
    from hpcshuffle.train import main as importable_main

    importable_main()
