"""How a step trains: the learner (model, loss, step, virtual workers' batch norm), where BatchNorm
takes its statistics, optimizers and schedules, evaluation, checkpoints, how a failing rank ends the
run, the per-epoch metrics and their sinks."""
