"""Bringing node-local stores to what the plan says, peers first: staging and recovery (stage.py)
and the run's dataset, synthesized on first use, listed on rank 0 and shared with every rank
(dataset.py). Staging moves samples between ranks through comm/, so it sits above it."""
