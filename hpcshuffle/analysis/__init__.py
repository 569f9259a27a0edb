"""Analyses that need no cluster: Yang & Cong (2019)'s imbalance simulation and performance model,
and the comparison of finished runs.

`imbalance` simulates how evenly a global mini-batch falls into the learners' caches (Fig. 6)
and how many balancing transfers Algorithm 1 needs; `model` predicts epoch times for regular,
distributed-cache and locality-aware loading (eqs. 1–8); `quality` scores how well a plan mixes;
`report` tabulates runs' breakdowns and curves and `tune` recommends q from a sweep's runs;
`plots` draws them (matplotlib, lazily).
"""
