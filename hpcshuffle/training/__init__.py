"""How a step trains: the learner (model, loss, step, virtual workers' batch norm), optimizers and
schedules, evaluation, checkpoints, the per-epoch metrics and their sinks."""
