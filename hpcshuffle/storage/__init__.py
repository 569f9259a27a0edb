"""Where a sample lives and how a rank reads it: the node-local store and its packs, staging into it,
shared storage as a run sees it, the planned caches of shared reads, the run's dataset listing, and
the threaded fetch and DataLoader glue that read a step's batch."""
