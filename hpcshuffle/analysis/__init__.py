"""Analyses that need no cluster: Yang & Cong (2019)'s imbalance simulation and performance model.

`imbalance` simulates how evenly a global mini-batch falls into the learners' caches (Fig. 6)
and how many balancing transfers Algorithm 1 needs; `model` predicts epoch times for regular,
distributed-cache and locality-aware loading (eqs. 1–8); `plots` draws both (matplotlib, lazily).
"""
