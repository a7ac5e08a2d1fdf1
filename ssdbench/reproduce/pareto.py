"""`pareto`: SSD moves the throughput-latency Pareto frontier outward.

ar, sd and ssd over batch sizes 1, 2, 4 (quick: 1, 2): each method's points are total decode tokens/s
against the median per-request TPOT (report/pareto.py). The finding counts the ssd points that no ar or
sd point dominates (more throughput and less latency, or equal in one and better in the other).
"""

from __future__ import annotations

import math

import pandas as pd

from ssdbench.reproduce.findings import FAILS, HOLDS, Finding, unmeasurable
from ssdbench.reproduce.study import Study, StudyData, StudySweep

NAME = "pareto"
CLAIM = "SSD moves the throughput-latency Pareto frontier outward"
BATCHES, QUICK_BATCHES = (1, 2, 4), (1, 2)


def sweeps(base, quick: bool) -> list[StudySweep]:
    return [StudySweep(NAME, {"methods": ("ar", "sd", "ssd"), "timeline": False},
                       {"batch_size": list(QUICK_BATCHES if quick else BATCHES)})]


def method_points(requests: pd.DataFrame) -> pd.DataFrame:
    from ssdbench.report.pareto import throughput_latency

    frames = [throughput_latency(rows).assign(batch_size=batch) for batch, rows in requests.groupby("p_batch_size")]
    return pd.concat(frames, ignore_index=True)


def dominated(point: pd.Series, others: pd.DataFrame) -> bool:
    t, l = point["throughput_tokens_per_s"], point["latency_ms_p50"]
    better = others[(others["throughput_tokens_per_s"] >= t) & (others["latency_ms_p50"] <= l)
                    & ((others["throughput_tokens_per_s"] > t) | (others["latency_ms_p50"] < l))]
    return not better.empty


def judge(data: StudyData) -> list[Finding]:
    measured = "share of ssd points no ar or sd point dominates"
    if data.requests.empty:
        return [unmeasurable(NAME, CLAIM, measured, "no complete point recorded")]
    points = method_points(data.requests)
    ssd, others = points[points["method"] == "ssd"], points[points["method"].isin(["ar", "sd"])]
    if ssd.empty or others.empty:
        return [unmeasurable(NAME, CLAIM, measured, "needs ssd and ar or sd points")]
    outward = [not dominated(row, others) for _, row in ssd.iterrows()]
    share = sum(outward) / len(outward)
    verdict = HOLDS if any(outward) else FAILS
    reason = (f"{sum(outward)} of {len(outward)} ssd points lie beyond the ar/sd frontier" if any(outward)
              else "every ssd point is dominated by an ar or sd point")
    settings = {"points": [{"method": r["method"], "batch": int(r["batch_size"]),
                            "tok_s": round(r["throughput_tokens_per_s"], 2), "tpot_ms": round(r["latency_ms_p50"], 2)}
                           for _, r in points.iterrows()]}
    nan = math.nan
    return [Finding(NAME, CLAIM, measured, share, nan, nan, verdict,
                    f"{reason} (point estimates: one run per point, no interval)", settings=settings)]


STUDY = Study(NAME, CLAIM, "the frontier moves outward", sweeps, judge, why="the run's own temperature")
