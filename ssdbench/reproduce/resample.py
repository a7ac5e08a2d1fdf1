"""Bootstrap intervals over requests: a study's figure recomputed on requests drawn with replacement.

The unit is the request (suite, prompt, repeat), drawn jointly for every point of a study, so a figure
that compares points (a fit over fan-outs, a ratio of two backups) keeps each prompt's pairing.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np
import pandas as pd

UNIT = ["suite", "prompt_id", "repeat"]
RESAMPLES = 400
LEVEL = 0.95


def bootstrap(frame: pd.DataFrame, statistic: Callable[[pd.DataFrame], float], *, resamples: int = RESAMPLES,
              seed: int = 0) -> tuple[float, float, float]:
    """(estimate, low, high): the statistic on `frame`, and its percentile interval (NaN when fewer than
    half the resamples give a finite figure, or with one unit only)."""
    estimate = float(statistic(frame))
    units = frame.groupby(UNIT, sort=True).indices  # unit -> row positions
    positions = list(units.values())
    if len(positions) < 2 or not math.isfinite(estimate):
        return estimate, math.nan, math.nan
    rng = np.random.default_rng(seed)
    figures = []
    for _ in range(resamples):
        picks = rng.integers(0, len(positions), size=len(positions))
        rows = np.concatenate([positions[i] for i in picks])
        value = float(statistic(frame.iloc[rows]))
        if math.isfinite(value):
            figures.append(value)
    if len(figures) < resamples / 2:
        return estimate, math.nan, math.nan
    tail = (1 - LEVEL) / 2
    low, high = np.quantile(figures, [tail, 1 - tail])
    return estimate, float(low), float(high)


def paired_ratio(requests: pd.DataFrame, column: str, numerator, denominator, *,
                 value: str = "decode_tokens_per_s") -> pd.Series:
    """Per request (suite, prompt, repeat): value where column == numerator over value where == denominator."""
    keys = UNIT
    top = requests[requests[column] == numerator].groupby(keys)[value].mean()
    bottom = requests[requests[column] == denominator].groupby(keys)[value].mean()
    joined = pd.concat([top.rename("top"), bottom.rename("bottom")], axis=1).dropna()
    return joined["top"] / joined["bottom"]
