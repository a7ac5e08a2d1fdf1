"""`ssd-vs-sd`: with the backup equal to the primary speculator (jit), SSD is never slower than SD.

ar, sd and ssd in one run (interleaved per prompt); the figure is the paired geometric mean over prompts
of ssd's decode tokens/s over sd's, and the share of prompts where ssd is slower beyond a 5% noise band.
"""

from __future__ import annotations

from ssdbench.metrics.stats import geometric_mean_ci
from ssdbench.reproduce.findings import Finding, judge_above, unmeasurable
from ssdbench.reproduce.resample import paired_ratio
from ssdbench.reproduce.study import Study, StudyData, StudySweep

NAME = "ssd-vs-sd"
CLAIM = "with the backup equal to the primary speculator (jit), SSD is never slower than SD"
NOISE = 0.05  # a prompt is slower "beyond noise" when ssd/sd < 1 - NOISE


def sweeps(base, quick: bool) -> list[StudySweep]:
    return [StudySweep(NAME, {"methods": ("ar", "sd", "ssd"), "backup": "jit", "timeline": False},
                       {"temperature": [base.temperature]})]


def judge(data: StudyData) -> list[Finding]:
    measured = "ssd's decode tok/s over sd's (paired geometric mean)"
    if data.requests.empty:
        return [unmeasurable(NAME, CLAIM, measured, "no complete point recorded")]
    ratios = paired_ratio(data.requests, "method", "ssd", "sd")
    interval = geometric_mean_ci(ratios.to_numpy())
    slower = float((ratios < 1 - NOISE).mean()) if len(ratios) else float("nan")
    verdict, reason = judge_above(interval.low, interval.high, 1.0, above="ssd decodes faster than sd",
                                  below="ssd decodes slower than sd")
    return [Finding(NAME, CLAIM, measured, interval.estimate, interval.low, interval.high, verdict,
                    f"{reason}; {slower:.0%} of {len(ratios)} prompts slower by more than {NOISE:.0%}",
                    paper="never slower (ratio >= 1)",
                    settings={"backup": "jit", "prompts": len(ratios), "share_slower": slower})]


STUDY = Study(NAME, CLAIM, "never slower", sweeps, judge, why="the run's own temperature (default greedy)")
