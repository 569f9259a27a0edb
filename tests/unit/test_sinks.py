"""wandb logging: flat keys, offline by default, and never the reason a run fails."""

from __future__ import annotations

from hpcshuffle.training.sinks import flatten


def test_wandb_keys_are_flat_paths():
    record = {"epoch": 1, "time": {"io": {"mean": 0.5}}, "samples": {"sent": 3}}
    assert flatten(record) == {"epoch": 1, "time/io/mean": 0.5, "samples/sent": 3}


def test_wandb_sink_logs_utilisation_min_mean_max(tmp_path, monkeypatch):
    import wandb

    from hpcshuffle.training.sinks import WandbSink

    logged = []

    class FakeRun:
        def log(self, values, step):
            logged.append((step, values))

    monkeypatch.setattr(wandb, "init", lambda **kwargs: FakeRun())
    sink = WandbSink(tmp_path, "hpcshuffle", {})
    sink.log({"epoch": 2, "util": {"min": 0.25, "mean": 0.5, "max": 0.75}})
    assert logged == [(2, {"epoch": 2, "util/min": 0.25, "util/mean": 0.5, "util/max": 0.75})]


def test_wandb_sink_writes_offline_and_never_fails_a_run(tmp_path, monkeypatch, capsys):

    import wandb

    from hpcshuffle.training.sinks import WandbSink

    monkeypatch.delenv("WANDB_MODE", raising=False)
    settings = {"shuffle": {"name": "local", "q": 0.0}, "epochs": 1, "workers": 2}
    sink = WandbSink(tmp_path, "hpcshuffle", settings)
    assert sink.run is not None
    sink.log({"epoch": 0, "train_loss": 1.5, "time": {"io": {"mean": 0.1}}})
    sink.close()
    assert list((tmp_path / "wandb").glob("offline-run-*/run-*.wandb")), "no offline run was written"

    def broken(**kwargs):
        raise RuntimeError("no network")

    monkeypatch.setattr(wandb, "init", broken)
    sink = WandbSink(tmp_path, "hpcshuffle", settings)
    sink.log({"epoch": 0})  # a no-op now
    sink.close()
    assert "wandb disabled (RuntimeError: no network)" in capsys.readouterr().err
