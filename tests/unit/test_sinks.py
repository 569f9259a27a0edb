"""wandb logging: flat keys, offline by default, and never the reason a run fails."""

from __future__ import annotations

from hpcshuffle.sinks import flatten


def test_wandb_keys_are_flat_paths():
    record = {"epoch": 1, "time": {"io": {"mean": 0.5}}, "samples": {"sent": 3}}
    assert flatten(record) == {"epoch": 1, "time/io/mean": 0.5, "samples/sent": 3}


def test_wandb_sink_writes_offline_and_never_fails_a_run(tmp_path, monkeypatch, capsys):
    import types

    import wandb

    from hpcshuffle.config import DatasetConfig, RunConfig
    from hpcshuffle.optim import OptimConfig
    from hpcshuffle.sinks import WandbSink

    monkeypatch.delenv("WANDB_MODE", raising=False)
    config = RunConfig(shuffle="local", q=0.0, dataset=DatasetConfig("imagefolder", tmp_path), model="small_cnn",
                       epochs=1, batch_size=8, seed=0, optim=OptimConfig(), local_dir=tmp_path, stage=True,
                       replica=False, stage_threads=1, max_bytes=None, loader_workers=0, exchange_timeout_s=10.0,
                       device="cpu", threads=1, audit=False, progress=False, wandb=True)
    world = types.SimpleNamespace(size=2)
    sink = WandbSink(tmp_path, config, world)
    assert sink.run is not None
    sink.log({"epoch": 0, "train_loss": 1.5, "time": {"io": {"mean": 0.1}}})
    sink.close()
    assert list((tmp_path / "wandb").glob("offline-run-*/run-*.wandb")), "no offline run was written"

    def broken(**kwargs):
        raise RuntimeError("no network")

    monkeypatch.setattr(wandb, "init", broken)
    sink = WandbSink(tmp_path, config, world)
    sink.log({"epoch": 0})  # a no-op now
    sink.close()
    assert "wandb disabled (RuntimeError: no network)" in capsys.readouterr().err
