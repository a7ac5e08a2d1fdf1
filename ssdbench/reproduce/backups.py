"""`backups`: on a miss, the slow good backup (jit: draft now, the verifier waits) wins at small batch,
the fast one (n-gram or random tokens, no wait) at large batch.

ssd at temperature 1 (where misses are common), backup jit and fast, over batch sizes 1, 2, 4 (quick:
1, 2). Each batch's figure is the paired geometric mean over prompts of fast's decode tokens/s over jit's.
"""

from __future__ import annotations

import pandas as pd

from ssdbench.metrics.stats import geometric_mean_ci
from ssdbench.reproduce.findings import FAILS, HOLDS, INCONCLUSIVE, Finding, judge_above, unmeasurable
from ssdbench.reproduce.resample import paired_ratio
from ssdbench.reproduce.study import Study, StudyData, StudySweep

NAME = "backups"
BATCHES, QUICK_BATCHES = (1, 2, 4), (1, 2)


def sweeps(base, quick: bool) -> list[StudySweep]:
    return [StudySweep(NAME, {"methods": ("ssd",), "temperature": 1.0, "timeline": False},
                       {"backup": ["jit", "fast"], "batch_size": list(QUICK_BATCHES if quick else BATCHES)})]


def fast_over_jit(requests: pd.DataFrame) -> dict[int, tuple[float, float, float]]:
    """Batch size -> (estimate, low, high) of fast's decode tokens/s over jit's, paired by prompt."""
    out = {}
    for batch, rows in requests.groupby("p_batch_size"):
        interval = geometric_mean_ci(paired_ratio(rows, "p_backup", "fast", "jit").to_numpy())
        out[int(batch)] = (interval.estimate, interval.low, interval.high)
    return out


def crossover(ratios: dict[int, tuple[float, float, float]]) -> tuple[int | None, str, str]:
    """(the crossover batch, verdict, reason): the smallest batch at which fast is surely faster, with jit
    surely faster at some smaller batch."""
    batches = sorted(ratios)
    jit_wins = [b for b in batches if ratios[b][2] < 1]
    fast_wins = [b for b in batches if ratios[b][1] > 1]
    if jit_wins and fast_wins and min(fast_wins) > min(jit_wins):
        return min(fast_wins), HOLDS, f"jit wins at batch {min(jit_wins)}, fast from batch {min(fast_wins)}"
    if fast_wins and min(fast_wins) == batches[0]:
        return None, FAILS, "fast wins already at the smallest batch"
    if jit_wins and jit_wins[-1] == batches[-1]:
        return None, FAILS if len(batches) > 1 else INCONCLUSIVE, f"jit still wins at batch {batches[-1]}"
    return None, INCONCLUSIVE, "no batch where one backup is surely faster than the other"


def miss_costs(steps: pd.DataFrame) -> str:
    """The measured cost of each backup on its miss rounds: round time and tokens emitted."""
    misses = steps[(steps["method"] == "ssd") & (steps["cache_hit"] == False)]  # noqa: E712 (nullable column)
    parts = []
    for backup, rows in misses.groupby("p_backup"):
        ms, tokens = rows["step_ms"].median(), rows["emitted"].mean()
        parts.append(f"{backup}: {ms:.1f} ms per miss round (median), {tokens:.2f} tokens, {1e3 * tokens / ms:.1f} "
                     f"tokens/s on misses ({len(rows)} misses)")
    return "; ".join(parts) or "no miss recorded"


def inverse(interval: tuple[float, float, float]) -> tuple[float, float, float]:
    """The interval of 1/x from that of x (its ends swap)."""
    estimate, low, high = interval
    return 1 / estimate, 1 / high, 1 / low


def judge(data: StudyData) -> list[Finding]:
    claim_small = "jit (slow, good) wins at small batch"
    claim_large = "fast wins at large batch"
    claim_cross = "the backups cross over at some batch size"
    if data.requests.empty:
        return [unmeasurable(NAME, c, "-", "no complete ssd point recorded")
                for c in (claim_small, claim_large, claim_cross)]
    ratios = fast_over_jit(data.requests[data.requests["method"] == "ssd"])
    costs = miss_costs(data.steps)
    settings = {"temperature": 1.0, "batches": sorted(ratios),
                "fast_over_jit": {b: round(r[0], 4) for b, r in ratios.items()}}
    smallest, largest = min(ratios), max(ratios)
    est, low, high = inverse(ratios[smallest])
    verdict, reason = judge_above(low, high, 1.0, above="jit decodes faster", below="fast decodes faster")
    findings = [Finding(NAME, claim_small, f"jit's tok/s over fast's at batch {smallest}", est, low, high, verdict,
                        reason, settings=settings)]
    est, low, high = ratios[largest]
    verdict, reason = judge_above(low, high, 1.0, above="fast decodes faster", below="jit decodes faster")
    findings.append(Finding(NAME, claim_large, f"fast's tok/s over jit's at batch {largest}", est, low, high,
                            verdict, reason, settings=settings))
    batch, verdict, reason = crossover(ratios)
    nan = float("nan")
    findings.append(Finding(NAME, claim_cross, "crossover batch size", float(batch) if batch else nan, nan, nan,
                            verdict, f"{reason}; measured costs: {costs}", settings=settings))
    return findings


STUDY = Study(NAME, "on a miss, the slow good backup wins at small batch, the fast one at large batch",
              "jit at small batch, fast at large", sweeps, judge,
              why="temperature 1, where misses are common enough for the backup to matter")
