"""The Hydra config tree: every experiment composes into a valid run config; bad settings are named."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from hpcshuffle import models
from hpcshuffle.config import RunConfig
from hpcshuffle.errors import ConfigError
from hpcshuffle.train import CONFIG_DIR

EXPERIMENTS = sorted(path.stem for path in (Path(CONFIG_DIR) / "experiment").glob("*.yaml"))


def run_config(*overrides: str) -> RunConfig:
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        return RunConfig.from_hydra(compose(config_name="config", overrides=list(overrides)))


def test_default_is_the_cpu_demo():
    config = run_config()
    assert (config.model.name, config.dataset.format, config.optim.name, config.device) == ("small_cnn", "imagefolder", "sgd", "cpu")


def test_the_resolved_config_reads_back_with_a_safe_yaml_loader():
    import yaml

    from hpcshuffle.config import resolved_yaml

    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        text = resolved_yaml(compose(config_name="config", overrides=["dataset.root=/data/x"]))
    settings = yaml.safe_load(text)  # report and tune-q read a run's config.yaml this way
    assert settings["dataset"]["root"] == "/data/x"
    assert isinstance(settings["storage"]["local_dir"], str)


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_every_experiment_composes(experiment):
    weights = ["model.weights=/w.pt"] if experiment == "cars_resnet50" else []  # fine-tuning needs them
    config = run_config(f"+experiment={experiment}", "dataset.root=/datasets/x", *weights)
    assert config.epochs >= 30 and config.optim.lr > 0
    # the model options it sets are ones the model has (`weights` is the runner's own)
    assert set(config.model.options) - {"weights"} <= set(models.default_options(config.model.name))


def test_paper_recipes():
    resnet = run_config("+experiment=imagenet1k_resnet50", "dataset.root=/imagenet")
    assert (resnet.model.name, resnet.optim.milestones, resnet.optim.peak_lr(32 * 512)) == ("resnet50", (30, 60, 80), pytest.approx(6.4))
    wrn = run_config("+experiment=cifar100_wrn28_10", "dataset.root=/cifar")
    assert (wrn.model.options["dropout"], wrn.optim.gamma, wrn.dataset.format) == (0.3, 0.2, "cifar100")
    deepcam = run_config("+experiment=deepcam", "dataset.root=/deepcam")
    assert (deepcam.optim.name, deepcam.optim.unit, deepcam.optim.warmup, deepcam.optim.milestones) == ("lamb", "step", 400, (800,))
    assert deepcam.dataset.class_weights == pytest.approx((1.00173, 2.61461, 1.71642))
    lars = run_config("+experiment=imagenet1k_resnet50_lars", "dataset.root=/imagenet")
    assert (lars.optim.name, lars.loss.label_smoothing, lars.model.name) == ("lars", 0.1, "resnet50")


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("+optim.learning_rate=0.1", "optim.learning_rate is not a setting of optim"),
        ("optim.schedule=linear", "optim.schedule must be one of"),
        ("precision=fp16", "precision must be one of"),
        ("dataset.augment=mixup", "dataset.augment must be one of"),
        ("loss.label_smoothing=1.5", r"loss.label_smoothing must be in \[0, 1\)"),
        ("cache.policy=fifo", "cache.policy must be 'none' or one of"),
        ("cache.policy=lru shuffle=local",
         "only shuffle=global or shuffle=corgipile or shuffle=streaming_py1e or shuffle=streaming_py1br without "
         "storage.replica makes"),
        ("cache.policy=lru shuffle=global cache.samples=0", "cache.samples must be >= 1 or null"),
        ("loader.io_threads=0", "loader.io_threads must be >= 1"),
        ("shuffle.virtual_workers=-1", r"shuffle.virtual_workers must be >= 0 \(0: off\), got -1"),
        ("shuffle.virtual_workers=8 shuffle.virtual_chunk=-1",
         r"shuffle.virtual_chunk must be >= 0 \(0: all of them\), got -1"),
        ("loader.decode_threads=-1", "loader.decode_threads must be >= 0, got -1"),
        ("loader.decode=nvjpeg", r"loader.decode must be 'cpu' \(loader workers\) or 'gpu'"),
        ("loader.decode=gpu loader.gpu_fraction=1.5", r"loader.gpu_fraction must be in \[0, 1\] .*, got 1.5"),
        ("loader.decode=gpu dataset=cifar100 dataset.root=/cifar", "loader.decode=gpu decodes JPEG images .* use loader.decode=cpu"),
        ("shuffle.virtual_chunk=2", "shuffle.virtual_chunk only applies with shuffle.virtual_workers=M"),
        ("shuffle.virtual_workers=8 loader.on_error=skip", "set loader.on_error=fail"),
        ("shuffle.virtual_workers=8 shuffle=global cache.policy=lru", "set cache.policy=none and storage.replica=false"),
        ("storage.scope=nodes", "storage.scope must be one of"),
        ("shuffle.unit=file", r"shuffle.unit must be one of \('sample', 'shard'\), got 'file'"),
        ("shuffle.buffer=-5", "shuffle.buffer must be >= 0 samples"),
        ("shuffle=global shuffle.unit=shard", "but shuffle=global trains on global batches: use shuffle=local or partial"),
        ("shuffle=locality shuffle.buffer=64", "but shuffle=locality trains on global batches"),
        ("storage.partition=sorted", r"storage.partition must be one of random, contiguous, dirichlet-<α>, "
                                     r"classes_per_worker-<k>, got 'sorted'"),
        ("storage.partition=dirichlet", "give Dirichlet's concentration α > 0 after the dash, e.g. dirichlet-0.1"),
        ("storage.partition=classes_per_worker-1.5", "give the classes per worker, a whole number >= 1"),
        ("storage.ranks_per_node=0", "storage.ranks_per_node must be >= 1"),
        ("world.timeout_s=0", r"world.timeout_s must be > 0 seconds .*, got 0"),
        ("world.timeout_s=-5", r"world.timeout_s must be > 0 seconds .*, got -5"),
        ("+exchange.timeout_s=60", "exchange is not a setting of the config"),
    ],
)
def test_bad_settings_are_named(override, message):
    with pytest.raises(ConfigError, match=message):
        run_config(*override.split())


@pytest.mark.parametrize(
    ("overrides", "node_size", "workers", "expected"),
    [
        (["shuffle=local"], 4, 16, 4),  # auto: several nodes of several ranks share node stores
        (["shuffle=partial", "shuffle.q=0.3"], 4, 4, 1),  # auto on one node: rank scope, or PLS would move nothing
        (["shuffle=local"], 1, 8, 1),  # one rank per node: nothing to share
        (["shuffle=local", "storage.scope=rank"], 4, 16, 1),
        (["shuffle=local", "storage.scope=node"], 4, 4, 4),  # asked for: one node, LS over all of it
        (["shuffle=global"], 4, 16, 1),  # reads shared storage: no partition to share
        (["shuffle=locality"], 4, 16, 4),
        (["shuffle=local"], 0, 16, 1),  # auto with uneven nodes: rank scope
    ],
)
def test_storage_scope_picks_ranks_per_node(overrides, node_size, workers, expected):
    assert run_config(*overrides).ranks_per_node(node_size, "", workers) == expected


@pytest.mark.parametrize(
    ("overrides", "node_size", "message"),
    [
        (["shuffle=global", "storage.scope=node"], 4, "shuffle=global reads shared storage and has no partition to share: set storage.scope=rank"),
        (["shuffle=local", "shuffle.virtual_workers=64", "storage.scope=node"], 4, "simulates the workers in one process"),
        (["shuffle=local", "storage.scope=node"], 0, "needs every node to run the same number of consecutive ranks"),
    ],
)
def test_node_scope_that_cannot_work_is_named(overrides, node_size, message):
    with pytest.raises(ConfigError, match=message):
        run_config(*overrides).ranks_per_node(node_size, "ranks 0..2 are not on one node", 16)


def test_a_synthetic_dataset_from_before_formats_is_reused_as_imagefolder(tmp_path):
    import json

    from hpcshuffle.formats.catalog import DatasetError
    from hpcshuffle.formats.synthetic import GENERATOR_VERSION
    from hpcshuffle.staging.dataset import ensure_synthetic

    spec = {"samples": 20, "classes": 2, "size": 8}
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / ".synthetic.json").write_text(json.dumps({**spec, "seed": 0, "generator": GENERATOR_VERSION}))
    ensure_synthetic("imagefolder", tmp_path / "data", spec, seed=0, progress=False)  # as it is
    with pytest.raises(DatasetError, match="holds a synthetic dataset made with"):
        ensure_synthetic("cifar100", tmp_path / "data", spec, seed=0, progress=False)
