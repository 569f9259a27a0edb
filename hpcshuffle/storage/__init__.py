"""Where a sample lives and how a rank reads it: the node-local store and its packs and layout,
node-local space, shared storage as a run sees it, the planned caches of shared reads, shard sizes,
and the threaded fetch and DataLoader glue that read a step's batch. Staging into a store moves
samples between ranks, so it lives above comm/, in staging/."""
