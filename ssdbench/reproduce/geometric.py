"""`geometric`: at an equal total budget, the geometric fan-out (from the fitted power law and acceptance)
beats a uniform one.

ssd with `--fan-out geometric` fitted on the fan-out study's temperature-1 point of the widest fan-out,
against uniform F = 3: both build 3 (K + 1) branches a round (run/plan.py:_fit_geometric). At temperature
0, 0.7 and 1 (quick: 1). Figures: the hit rate's difference, and the paired decode tokens/s ratio.
"""

from __future__ import annotations

import math

import pandas as pd

from ssdbench.metrics.stats import geometric_mean_ci
from ssdbench.reproduce import fan_out
from ssdbench.reproduce.findings import Finding, judge_above, unmeasurable
from ssdbench.reproduce.resample import bootstrap, paired_ratio
from ssdbench.reproduce.study import Study, StudyData, StudySweep, study_base

NAME = "geometric"
UNIFORM = "3"  # 3 branches per accepted count: the budget geometric gets, 3 (K + 1)
TEMPERATURES, QUICK_TEMPERATURES = (0.0, 0.7, 1.0), (1.0,)


def fit_point(base, quick: bool):
    """The fan-out study's run that the geometric fan-out is fitted on: temperature 1, its widest F."""
    from ssdbench.run.sweep import grid, point_status

    [sweep] = fan_out.sweeps(base, quick)
    points = [p for p in grid(study_base(base, sweep), sweep.axes) if p.as_dict()["temperature"] == 1.0]
    widest = max(points, key=lambda p: int(p.as_dict()["fan_out"]))
    path = base.out / sweep.folder / widest.name
    return path, point_status(path) == "complete"


def sweeps(base, quick: bool) -> list[StudySweep]:
    path, ready = fit_point(base, quick)
    skipped = None if ready else f"needs the fan-out study's run {path} to fit from (run the fan-out study first)"
    return [StudySweep(NAME, {"methods": ("ssd",), "fit_from": path, "backup": "jit", "timeline": False},
                       {"fan_out": [UNIFORM, "geometric"],
                        "temperature": list(QUICK_TEMPERATURES if quick else TEMPERATURES)}, skipped=skipped)]


def hit_gain(steps: pd.DataFrame) -> float:
    known = steps[steps["cache_hit"].notna()]
    rates = known.assign(hit=known["cache_hit"].astype(float)).groupby("p_fan_out")["hit"].mean()
    if "geometric" not in rates or UNIFORM not in rates:
        return math.nan
    return float(rates["geometric"] - rates[UNIFORM])


def judge(data: StudyData) -> list[Finding]:
    claim_hit = "the geometric fan-out's hit rate beats a uniform one's at an equal budget"
    claim_speed = "the geometric fan-out decodes faster than a uniform one at an equal budget"
    if data.skipped or data.steps.empty:
        reason = next(iter(data.skipped.values()), "no complete point recorded")
        return [unmeasurable(NAME, c, "-", reason) for c in (claim_hit, claim_speed)]
    findings = []
    for t, steps in data.steps[data.steps["method"] == "ssd"].groupby("p_temperature"):
        settings = {"temperature": float(t), "uniform": int(UNIFORM)}
        est, low, high = bootstrap(steps, hit_gain)
        verdict, reason = judge_above(low, high, 0.0, above="geometric hits more often",
                                      below="uniform hits more often")
        findings.append(Finding(NAME, f"{claim_hit} (T={t:g})", "hit rate, geometric minus uniform", est, low, high,
                                verdict, reason, settings=settings))
        requests = data.requests[(data.requests["method"] == "ssd") & (data.requests["p_temperature"] == t)]
        interval = geometric_mean_ci(paired_ratio(requests, "p_fan_out", "geometric", UNIFORM).to_numpy())
        verdict, reason = judge_above(interval.low, interval.high, 1.0, above="geometric decodes faster",
                                      below="uniform decodes faster")
        findings.append(Finding(NAME, f"{claim_speed} (T={t:g})", "decode tok/s, geometric over uniform",
                                interval.estimate, interval.low, interval.high, verdict, reason, settings=settings))
    return findings


STUDY = Study(NAME, "at an equal total budget, the geometric fan-out beats a uniform one",
              "geometric beats uniform", sweeps, judge,
              why="fitted on the fan-out study's temperature-1 run, where the miss rate can be fitted")
