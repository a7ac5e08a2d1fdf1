"""`saguaro`: Saguaro sampling raises the hit rate at the cost of acceptance; an intermediate C is best
at temperature > 0.

ssd at temperature 1, uniform fan-out 2, C = 1, 0.8, 0.6, 0.4, 0.2 (quick: 1, 0.6, 0.2). The trends are
the slopes of the per-C hit rate and acceptance against C; the best C compares decode tokens/s.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ssdbench.projection.theory import fit_acceptance
from ssdbench.reproduce.findings import Finding, judge_above, unmeasurable
from ssdbench.reproduce.resample import bootstrap
from ssdbench.reproduce.study import Study, StudyData, StudySweep

NAME = "saguaro"
CS, QUICK_CS = (1.0, 0.8, 0.6, 0.4, 0.2), (1.0, 0.6, 0.2)


def sweeps(base, quick: bool) -> list[StudySweep]:
    return [StudySweep(NAME, {"methods": ("ssd",), "temperature": 1.0, "fan_out": "2", "backup": "jit",
                              "timeline": False}, {"saguaro_c": list(QUICK_CS if quick else CS)})]


def slope_against_c(frame: pd.DataFrame, figure) -> float:
    """Least-squares slope of figure(rows at C) against C; NaN with fewer than two C."""
    per_c = [(c, figure(rows)) for c, rows in frame.groupby("p_saguaro_c")]
    per_c = [(c, y) for c, y in per_c if math.isfinite(y)]
    if len(per_c) < 2:
        return math.nan
    c, y = np.array(per_c, dtype=float).T
    return float(np.polyfit(c, y, 1)[0])


def hit_rate(rows: pd.DataFrame) -> float:
    known = rows[rows["cache_hit"].notna()]
    return float(known["cache_hit"].astype(float).mean()) if len(known) else math.nan


def best_interior_over_ends(requests: pd.DataFrame) -> float:
    """Mean decode tokens/s of the best C strictly inside the range over that of the better end."""
    speed = requests.groupby("p_saguaro_c")["decode_tokens_per_s"].mean().sort_index()
    if len(speed) < 3:
        return math.nan
    return float(speed.iloc[1:-1].max() / max(speed.iloc[0], speed.iloc[-1]))


def judge(data: StudyData) -> list[Finding]:
    claim_hit = "Saguaro sampling (C < 1) raises the cache hit rate"
    claim_acc = "... at the cost of acceptance"
    claim_best = "an intermediate C is best at temperature > 0"
    if data.steps.empty:
        return [unmeasurable(NAME, c, "-", "no complete ssd point recorded") for c in (claim_hit, claim_acc,
                                                                                       claim_best)]
    rows = data.steps[(data.steps["method"] == "ssd") & (data.steps["proposed"] > 0)]
    requests = data.requests[data.requests["method"] == "ssd"]
    settings = {"temperature": 1.0, "fan_out": 2, "C": sorted(rows["p_saguaro_c"].unique().tolist()),
                "hit_rates": [round(hit_rate(g), 4) for _, g in rows.groupby("p_saguaro_c")],
                "acceptance": [round(fit_acceptance(g), 4) for _, g in rows.groupby("p_saguaro_c")]}
    findings = []
    for claim, measured, figure, above, below in (
            (claim_hit, "fall of the hit rate per unit of C (-slope)", lambda f: -slope_against_c(f, hit_rate),
             "the hit rate rises as C falls", "the hit rate falls as C falls"),
            (claim_acc, "fall of the acceptance per unit of C (slope)",
             lambda f: slope_against_c(f, fit_acceptance),
             "acceptance falls as C falls", "acceptance rises as C falls")):
        est, low, high = bootstrap(rows, figure)
        verdict, reason = judge_above(low, high, 0.0, above=above, below=below)
        findings.append(Finding(NAME, claim, measured, est, low, high, verdict, reason, settings=settings))
    est, low, high = bootstrap(requests, best_interior_over_ends)
    if not math.isfinite(est):
        findings.append(unmeasurable(NAME, claim_best, "best inner C's tok/s over the better end's",
                                     "needs three values of C or more", settings=settings))
    else:
        verdict, reason = judge_above(low, high, 1.0, above="an inner C decodes fastest",
                                      below="an end of the range (C = 1 or the smallest) decodes fastest")
        findings.append(Finding(NAME, claim_best, "best inner C's tok/s over the better end's", est, low, high,
                                verdict, reason, settings=settings))
    return findings


STUDY = Study(NAME, "Saguaro sampling raises the hit rate at the cost of acceptance; an intermediate C is best",
              "an intermediate C is best at temperature > 0", sweeps, judge,
              why="temperature 1, where the draft's top-F tokens miss often enough for C to matter")
