"""What the drivers in `experiments/` and `benchmarks/` share, so that each script is argparse and
calls: launching and reusing training runs, the scale study's jobs, cache and tables, the namespace
cluster and its Slurm jobs, the storage-latency and shared-read measurements. The top layer, beside
`cli` and `scale`: it may use every package below it, and none of them uses it."""
