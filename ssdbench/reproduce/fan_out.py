"""`fan-out`: the cache miss rate falls as a power law of the fan-out, 1 - hit(F) ~ F^-r.

ssd at uniform F = 1, 2, 4, 8 (quick: 1, 2, 4), at temperature 0 and 1. r is fitted by least squares on
log miss rate against log F, each fan-out weighted by its rounds; its interval resamples requests.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ssdbench.report.ssd_summary import chain_against_verify
from ssdbench.reproduce.findings import HOLDS, INCONCLUSIVE, Finding, judge_above, unmeasurable
from ssdbench.reproduce.resample import bootstrap
from ssdbench.reproduce.study import Study, StudyData, StudySweep

NAME = "fan-out"
CLAIM = "the cache miss rate falls as a power law of the fan-out: 1 - hit(F) ~ F^-r"
SATURATED = 0.98  # a hit rate at F = 1 above this leaves nothing measurable to fall
GOOD_FIT = 0.8  # R^2 on log-log axes at which the fall reads as a power law
FAN_OUTS, QUICK_FAN_OUTS = ("1", "2", "4", "8"), ("1", "2", "4")


def sweeps(base, quick: bool) -> list[StudySweep]:
    fan_outs = QUICK_FAN_OUTS if quick else FAN_OUTS
    return [StudySweep(NAME, {"methods": ("ssd",), "backup": "jit", "timeline": False},
                       {"fan_out": list(fan_outs), "temperature": [0.0, 1.0]})]


def miss_by_fan_out(rows: pd.DataFrame) -> pd.DataFrame:
    """Per uniform fan-out F: rounds and miss rate of the ssd rounds that know whether they hit."""
    hit = rows["cache_hit"].astype(float)
    table = rows.assign(F=rows["p_fan_out"].astype(int), hit=hit).groupby("F")["hit"].agg(rounds="size",
                                                                                          hit_rate="mean")
    return table.assign(miss_rate=1.0 - table["hit_rate"]).reset_index()


def fit(rows: pd.DataFrame) -> tuple[float, float]:
    """(r, R^2) of log miss = c - r log F over the fan-outs with a miss; NaN with fewer than two."""
    table = miss_by_fan_out(rows)
    table = table[table["miss_rate"] > 0]
    if len(table) < 2:
        return math.nan, math.nan
    x, y = np.log(table["F"].to_numpy(float)), np.log(table["miss_rate"].to_numpy(float))
    w = table["rounds"].to_numpy(float)
    slope, intercept = np.polyfit(x, y, 1, w=np.sqrt(w))
    residual = y - (slope * x + intercept)
    spread = y - np.average(y, weights=w)
    total = float(np.sum(w * spread**2))
    r2 = 1.0 - float(np.sum(w * residual**2)) / total if total > 0 else math.nan
    return float(-slope), r2


def judge(data: StudyData) -> list[Finding]:
    steps = data.steps
    if steps.empty:
        return [unmeasurable(NAME, CLAIM, "r", "no complete ssd point recorded")]
    ssd = steps[steps["method"] == "ssd"]
    rows = ssd[ssd["cache_hit"].notna()]
    events = data.events
    findings = []
    for t in sorted(rows["p_temperature"].unique()):
        at_t = events[events["p_temperature"] == t] if "p_temperature" in events.columns else None
        chain = (chain_against_verify(ssd[ssd["p_temperature"] == t], at_t, data.base.k)
                 if at_t is not None and data.base is not None else None)
        findings.append(judge_temperature(rows[rows["p_temperature"] == t], float(t), chain=chain))
    return findings


def judge_temperature(rows: pd.DataFrame, temperature: float, *, chain: dict | None = None) -> Finding:
    """`chain`: report/ssd_summary.py's check of the draft's chain against a verify at this temperature. Where
    the chain does not fit, a wider tree is finished later rather than hit more often, so a miss rate that does
    not fall says more of this CPU's tree kernel than of the fan-out: inconclusive, said why."""
    measured = f"power-law exponent r at temperature {temperature:g}"
    table = miss_by_fan_out(rows)
    settings = {"temperature": temperature, "fan_outs": table["F"].tolist(),
                "hit_rates": [round(h, 4) for h in table["hit_rate"]], "rounds": table["rounds"].tolist()}
    first = table.iloc[0]
    if first["hit_rate"] >= SATURATED:
        return unmeasurable(NAME, CLAIM, measured, f"degenerate on this pair: the hit rate is already "
                            f"{first['hit_rate']:.1%} at F = {int(first['F'])}, nothing left to fall",
                            settings=settings)
    estimate, low, high = bootstrap(rows, lambda frame: fit(frame)[0])
    r, r2 = fit(rows)
    if not math.isfinite(r):
        return unmeasurable(NAME, CLAIM, measured, "too few misses to fit: fewer than two fan-outs with a miss",
                            settings=settings)
    verdict, reason = judge_above(low, high, 0.0, above="the miss rate falls with F",
                                  below="the miss rate rises with F")
    if verdict == HOLDS and not r2 >= GOOD_FIT:
        verdict, reason = INCONCLUSIVE, f"the miss rate falls with F, but not as a power law (R^2 = {r2:.2f})"
    if chain is not None and not chain["fits"]:
        late = (f"the draft's chain (glue {chain['glue_ms']:.1f} ms + {chain['k']} tree steps × "
                f"{chain['tree_step_ms']:.1f} ms) outlasts a verify ({chain['verify_ms']:.1f} ms) here, so wider trees "
                "come later rather than hit more often")
        verdict, reason = (verdict, f"{reason}; {late}") if verdict == HOLDS else (INCONCLUSIVE, f"{late} ({reason})")
    return Finding(NAME, CLAIM, measured, estimate, low, high, verdict, f"{reason}; R^2 = {r2:.2f}",
                   paper="a power law in F", settings={**settings, "r2": r2})


STUDY = Study(NAME, CLAIM, "1 - hit(F) ~ F^-r", sweeps, judge,
              why="temperature 0 and 1: at 0 the embedded int8 self-draft saturates the hit rate at F = 1, at 1 "
                  "misses are common enough to fit")
