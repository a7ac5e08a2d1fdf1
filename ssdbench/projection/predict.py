"""A prediction that does not restate the measurement (DESIGN.md 4.6).

Speedup over ar is modelled from inputs measured apart from the rounds it predicts:
- the target's forward cost T(n) over n tokens, and the in-process draft's one-token step
  c, from the run's calibration (projection.calibrate), taken after the decode;
- ssd's speculator rebuild time T_p (glue + tree steps per round) and backup time T_b,
  from the draft process's own events;
- acceptance per position and the cache hit rate: counts, not times.
Then sd: E · T(1) / (T(K+1) + K·c); ssd: Theorem 7 with T_v = T(K+1), T_p, T_b.
Where an input has to come from the predicted variant's own round times (a run without
calibration or events, or batch > 1, where costs were calibrated at batch 1), the result
is an accounting check, labelled so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ssdbench.projection import theory

PREDICTION, ACCOUNTING = "prediction", "accounting check"


@dataclass(frozen=True)
class Costs:
    """The cost inputs of one variant's prediction, in ms."""

    t1_ms: float  # target forward over 1 token (an ar round's work)
    verify_ms: float  # target forward over K+1 tokens
    draft_step_ms: float  # sd: one draft step in the target's process
    rebuild_ms: float  # ssd: T_p, glue + tree steps per round on the draft's device
    backup_ms: float  # ssd: T_b, a miss's backup
    basis: str  # PREDICTION or ACCOUNTING


def forward_cost_ms(target_ms: dict[int, float], n: int) -> float:
    """T(n): the calibrated value, else a straight line through the calibrated points."""
    if n in target_ms:
        return target_ms[n]
    xs, ys = list(target_ms), list(target_ms.values())
    if len(xs) < 2:
        return ys[0]
    mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys)) / sum((x - mean_x) ** 2 for x in xs)
    return mean_y + slope * (n - mean_x)


def tokens_per_round(steps) -> float:
    """E = 1 + Σ_i P(first i drafts accepted), from the per-position marginals (1 + mean accepted at fixed K)."""
    if steps.empty:
        return math.nan
    per_position = theory.per_position_acceptance(steps)
    drafted = (steps["proposed"] > 0).mean()
    return 1.0 + drafted * float(per_position["marginal"].sum())


def draft_event_costs(events, method: str) -> tuple[float, float] | None:
    """(T_p, T_b) in ms from the draft process's events: (glue + tree) per glue pass, mean backup."""
    if events is None or events.empty:
        return None
    own = events[events["method"] == method]
    ms = (own["t_end_ns"] - own["t_start_ns"]) / 1e6
    glue = int((own["kind"] == "glue").sum())
    if glue == 0:
        return None
    rebuild = float(ms[own["kind"].isin(["glue", "tree"])].sum()) / glue
    backups = ms[own["kind"] == "backup"]
    return rebuild, float(backups.mean()) if len(backups) else 0.0


def calibrated_costs(calibration: dict | None, *, k: int, is_ngram: bool, events_costs, batch_size: int) -> Costs | None:
    """Costs from the calibration and the draft's events; None where they are missing."""
    if not calibration or batch_size != 1:
        return None
    target_ms = {int(n): float(ms) for n, ms in calibration["target_forward_ms"].items()}
    step = 0.0 if is_ngram else calibration.get("draft_step_ms")
    rebuild, backup = events_costs if events_costs else (math.nan, math.nan)
    if step is None:
        step = math.nan
    return Costs(forward_cost_ms(target_ms, 1), forward_cost_ms(target_ms, k + 1), float(step), rebuild, backup,
                 PREDICTION)


def predict_sd(e: float, k: int, costs: Costs) -> float:
    return e * costs.t1_ms / (costs.verify_ms + k * costs.draft_step_ms)


def predict_ssd(h: float, e_hit: float, e_miss: float, costs: Costs) -> float:
    """Theorem 7 in units of one ar round T(1)."""
    return theory.ssd_speedup(h, e_hit if h > 0 else 0.0, e_miss if h < 1 else 0.0,
                              t_p=costs.rebuild_ms / costs.t1_ms, t_b=costs.backup_ms / costs.t1_ms,
                              t_verify=costs.verify_ms / costs.t1_ms)
