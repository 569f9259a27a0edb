"""Lognormal or Pareto? Both families fitted by maximum likelihood to positive samples (times, factors),
on the whole sample or on its tail above a quantile (each family's density conditional there), and
compared by log-likelihood, Vuong's normalised likelihood ratio and the KS distance of each fit
(hpcshuffle/studies/tails.py holds them against measured read times)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import optimize, special, stats


def _positive(samples, least: int = 2) -> np.ndarray:
    """`samples` as a float array of at least `least` finite values > 0, else ValueError."""
    x = np.asarray(samples, dtype=np.float64).ravel()
    if x.size < least:
        raise ValueError(f"need at least {least} samples, got {x.size}")
    if not np.all(np.isfinite(x)) or np.any(x <= 0):
        raise ValueError("samples must be finite and > 0 (times or factors)")
    if np.ptp(x) == 0:
        raise ValueError("samples are all equal: no family can be fitted")
    return x


@dataclass(frozen=True)
class FamilyComparison:
    """Lognormal against Pareto on one set of samples (above `threshold`, when one is given: the
    conditional densities there): each family's maximum log-likelihood and parameters, the KS distance of
    each fit, and Vuong's z (the summed log-likelihood ratio lognormal − Pareto over its standard error;
    > 0 favours the lognormal) with its two-sided p-value."""

    n: int
    threshold: float | None
    lognormal: dict
    pareto: dict
    loglik_lognormal: float
    loglik_pareto: float
    ks_lognormal: float
    ks_pareto: float
    vuong_z: float
    vuong_p: float

    @property
    def better(self) -> str:
        """The family of the higher log-likelihood."""
        return "lognormal" if self.loglik_lognormal >= self.loglik_pareto else "pareto"

    def as_dict(self) -> dict:
        """The comparison as JSON-able numbers, with `better`."""
        return {"n": self.n, "threshold": self.threshold, "lognormal": self.lognormal, "pareto": self.pareto,
                "loglik_lognormal": self.loglik_lognormal, "loglik_pareto": self.loglik_pareto,
                "ks_lognormal": self.ks_lognormal, "ks_pareto": self.ks_pareto, "vuong_z": self.vuong_z,
                "vuong_p": self.vuong_p, "better": self.better}


def compare_families(samples, tail_quantile: float | None = None) -> FamilyComparison:
    """Fit a lognormal and a Pareto to `samples` by maximum likelihood and compare them.

    Whole sample (`tail_quantile` None): lognormal (μ, σ of the logs) against Pareto (x_m = the smallest
    sample, α = n / Σ ln(x/x_m)). Tail: only the samples above their `tail_quantile` u, each family's
    density conditional on x > u: Pareto with x_m = u, against a lognormal truncated at u (μ, σ fitted
    numerically). Needs at least 2 samples (10 above u for a tail), all finite and > 0."""
    x = _positive(samples)
    threshold = None
    if tail_quantile is not None:
        if not 0 < tail_quantile < 1:
            raise ValueError(f"tail_quantile must be in (0, 1), got {tail_quantile}")
        threshold = float(np.quantile(x, tail_quantile))
        x = x[x > threshold]
        if x.size < 10:
            raise ValueError(f"{x.size} samples above the {tail_quantile} quantile: need at least 10 for a tail")
    logs = np.log(x)
    n = x.size
    if threshold is None:
        mu, sigma = float(logs.mean()), float(logs.std())
        ln_each = stats.norm.logpdf(logs, mu, sigma) - logs
        ln_cdf = stats.lognorm(sigma, scale=math.exp(mu)).cdf
        x_m = float(x.min())
    else:
        mu, sigma = _truncated_lognormal(logs, math.log(threshold))
        ln_each = (stats.norm.logpdf(logs, mu, sigma) - logs
                   - special.log_ndtr((mu - math.log(threshold)) / sigma))
        log_mass = special.log_ndtr((mu - math.log(threshold)) / sigma)
        ln_cdf = lambda v: -np.expm1(special.log_ndtr((mu - np.log(v)) / sigma) - log_mass)  # noqa: E731
        x_m = threshold
    excess = np.log(x / x_m)
    alpha = float(n / excess.sum())
    pareto_each = math.log(alpha) + alpha * math.log(x_m) - (alpha + 1) * logs
    ratio = ln_each - pareto_each
    spread = float(ratio.std())
    z = float(ratio.sum() / (math.sqrt(n) * spread)) if spread > 0 else 0.0
    pareto_cdf = lambda v: 1.0 - (x_m / np.maximum(v, x_m)) ** alpha  # noqa: E731
    return FamilyComparison(
        n=int(n), threshold=threshold, lognormal={"mu": mu, "sigma": sigma,
                                                  "cv": math.sqrt(math.expm1(sigma ** 2)) if sigma < 26 else None},
        pareto={"x_m": x_m, "alpha": alpha}, loglik_lognormal=float(ln_each.sum()),
        loglik_pareto=float(pareto_each.sum()), ks_lognormal=float(stats.kstest(x, ln_cdf).statistic),
        ks_pareto=float(stats.kstest(x, pareto_cdf).statistic), vuong_z=z, vuong_p=float(2 * stats.norm.sf(abs(z))))


def _truncated_lognormal(logs: np.ndarray, log_threshold: float) -> tuple[float, float]:
    """(μ, σ) maximising the likelihood of `logs` under a normal truncated below at `log_threshold`."""
    def negative(params: np.ndarray) -> float:
        mu, sigma = params[0], math.exp(params[1])
        return -float(np.sum(stats.norm.logpdf(logs, mu, sigma)) - logs.size * special.log_ndtr((mu - log_threshold) / sigma))
    start = np.array([float(logs.mean()), math.log(max(float(logs.std()), 1e-6))])
    found = optimize.minimize(negative, start, method="Nelder-Mead", options={"xatol": 1e-8, "fatol": 1e-10,
                                                                                "maxiter": 4000})
    return float(found.x[0]), float(math.exp(found.x[1]))


def client_factors(per_reader: list[list[float]]) -> np.ndarray:
    """Each reader's mean time over the mean of the readers' means (the per-client factor, mean 1)."""
    if len(per_reader) < 2 or any(len(times) == 0 for times in per_reader):
        raise ValueError("client factors need at least 2 readers, each with at least one time")
    means = np.array([float(np.mean(times)) for times in per_reader])
    return means / means.mean()
