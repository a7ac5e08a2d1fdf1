"""Small statistics used by every summary: paired speedups with bootstrap intervals."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Interval:
    estimate: float
    low: float
    high: float
    n: int


def geometric_mean_ci(ratios: np.ndarray, *, num_resamples: int = 2000, level: float = 0.95, seed: int = 0) -> Interval:
    """Geometric mean of paired ratios with a percentile bootstrap interval (fixed seed: reproducible)."""
    ratios = np.asarray(ratios, dtype=float)
    ratios = ratios[np.isfinite(ratios) & (ratios > 0)]
    if ratios.size == 0:
        return Interval(float("nan"), float("nan"), float("nan"), 0)
    logs = np.log(ratios)
    estimate = float(np.exp(logs.mean()))
    if ratios.size == 1:
        return Interval(estimate, float("nan"), float("nan"), 1)
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, logs.size, size=(num_resamples, logs.size))
    means = logs[picks].mean(axis=1)
    tail = (1 - level) / 2
    low, high = np.quantile(means, [tail, 1 - tail])
    return Interval(estimate, float(np.exp(low)), float(np.exp(high)), int(ratios.size))
