"""Speculative-decoding theory (docs/DESIGN.md §5.5, §7.5): the SD and SSD speedup formulas, and
the quantities they need fitted from a run's records.

- per-token acceptance a: every draft position i that verification reached is one
  Bernoulli trial (accepted or not); a is the pooled conditional acceptance,
  Σ accepted / Σ positions reached — the maximum-likelihood a of a geometric acceptance
  process truncated at each round's proposal length.
- power-law miss model 1 − hit(F) = coef · F^(−r): least squares on logs of the SSD miss
  rate against the branch count `fan_out_total`, each fan-out weighted by its rounds.

Steps tables are `steps.parquet` frames (see ssdbench.records.schema).
"""

from __future__ import annotations

import math

from ssdbench.errors import UsageError


def expected_tokens(a: float, k: int) -> float:
    """Tokens committed per round (bonus included) with K drafts: (1 − a^(K+1)) / (1 − a)."""
    if a >= 1.0:
        return float(k + 1)
    return (1.0 - a ** (k + 1)) / (1.0 - a)


def sd_speedup(a: float, k: int, *, t_verify: float, c: float) -> float:
    """SD over AR: E_SD / (T_verify + K·c), times in units of one AR round (T_ar).

    `t_verify` is the verify round over K+1 positions (everything but drafting), `c` one
    draft step.
    """
    return expected_tokens(a, k) / (t_verify + k * c)


def ssd_speedup(h: float, e_hit: float, e_miss: float, *, t_p: float, t_b: float,
                t_verify: float = 1.0) -> float:
    """SSD over AR (the paper's Theorem 7):

        [h·E_hit + (1−h)·E_miss] / [h·max(T_v, T_p) + (1−h)·(T_v + T_b)]

    h hit probability, E_hit/E_miss tokens per round after a hit/miss, T_p the speculator's
    rebuild time, T_b the backup's time. With T_v = 1 (times in verify passes) this is
    Theorem 7 as printed; with times in AR rounds and T_v the measured verify round it is
    the speedup over AR when a verify round costs more than an AR round.
    """
    tokens = h * e_hit + (1.0 - h) * e_miss
    time = h * max(t_verify, t_p) + (1.0 - h) * (t_verify + t_b)
    return tokens / time


def _drafted(steps):
    return steps[steps["proposed"] > 0]


def per_position_acceptance(steps):
    """Per draft position i = 1..max K: marginal P(first i drafts accepted) and conditional
    P(draft i accepted | drafts 1..i−1 accepted), over rounds that proposed ≥ i drafts."""
    import numpy as np
    import pandas as pd

    rows = _drafted(steps)
    proposed = rows["proposed"].to_numpy(dtype=int)
    accepted = rows["accepted"].to_numpy(dtype=int)
    records = []
    for i in range(1, int(proposed.max(initial=0)) + 1):
        offered = proposed >= i
        reached = offered & (accepted >= i - 1)
        passed = offered & (accepted >= i)
        n_offered, n_reached, n_passed = int(offered.sum()), int(reached.sum()), int(passed.sum())
        records.append({"position": i, "rounds": n_offered, "reached": n_reached, "accepted": n_passed,
                        "marginal": n_passed / n_offered,
                        "conditional": n_passed / n_reached if n_reached else np.nan})
    columns = ["position", "rounds", "reached", "accepted", "marginal", "conditional"]
    return pd.DataFrame(records, columns=columns)


def fit_acceptance(steps) -> float:
    """Per-token acceptance a: Σ accepted / Σ positions reached (NaN without drafted rounds).

    A round that accepted n of K drafts reached n+1 positions when n < K, K when n = K.
    This pools the per-position conditional acceptances, weighted by how often each
    position was reached.
    """
    rows = _drafted(steps)
    accepted = rows["accepted"].to_numpy(dtype=float)
    reached = accepted + (rows["accepted"] < rows["proposed"]).to_numpy(dtype=float)
    total = reached.sum()
    return float(accepted.sum() / total) if total > 0 else math.nan


def mean_expected_tokens(steps, a: float) -> float:
    """E from a, averaged over the rounds' own proposal lengths (= E(a, K) for a fixed K)."""
    if steps.empty:
        return math.nan
    counts = steps["proposed"].value_counts()
    return float(sum(n * expected_tokens(a, int(k)) for k, n in counts.items()) / counts.sum())


def hit_rate_by_fan_out(steps):
    """SSD rounds grouped by `fan_out_total`: rounds, hit rate, miss rate (empty outside SSD)."""
    import pandas as pd

    rows = steps[steps["cache_hit"].notna() & steps["fan_out_total"].notna()]
    if rows.empty:
        return pd.DataFrame(columns=["fan_out_total", "rounds", "hit_rate", "miss_rate"])
    grouped = rows.assign(hit=rows["cache_hit"].astype(float)).groupby("fan_out_total")["hit"]
    table = grouped.agg(rounds="size", hit_rate="mean").reset_index()
    table["fan_out_total"] = table["fan_out_total"].astype(int)
    table["miss_rate"] = 1.0 - table["hit_rate"]
    return table


def fit_power_law(steps) -> tuple[float, float] | None:
    """(r, coef) of 1 − hit(F) = coef · F^(−r), or None with fewer than two usable fan-outs.

    Fan-outs with no miss (log 0) or F = 0 carry no information on logs and are left out.
    """
    import numpy as np

    table = hit_rate_by_fan_out(steps)
    table = table[(table["fan_out_total"] > 0) & (table["miss_rate"] > 0)]
    if len(table) < 2:
        return None
    log_f = np.log(table["fan_out_total"].to_numpy(dtype=float))
    log_miss = np.log(table["miss_rate"].to_numpy(dtype=float))
    slope, intercept = np.polyfit(log_f, log_miss, 1, w=np.sqrt(table["rounds"].to_numpy(dtype=float)))
    return float(-slope), float(math.exp(intercept))


def _outcome_probabilities(a: float, k: int) -> list[float]:
    """P(exactly j drafts accepted), j = 0..K, under per-token acceptance a."""
    return [a**j * (1.0 - a) for j in range(k)] + [a**k]


def _largest_remainder(quotas: list[float], total: int) -> list[int]:
    """Integers summing to `total`, each the floor of its quota or one more (ties: earlier first)."""
    floors = [math.floor(q) for q in quotas]
    order = sorted(range(len(quotas)), key=lambda i: (-(quotas[i] - floors[i]), i))
    for i in order[: total - sum(floors)]:
        floors[i] += 1
    return floors


def geometric_fan_out(budget: int, a: float, r: float, k: int) -> list[int]:
    """Branches per accepted count k = 0..K, the paper's optimum under a power-law miss model.

    F_k ∝ a^(k/(1+r)) for k < K and F_K ∝ a^(K/(1+r))·(1−a)^(−1/(1+r)) — i.e. F_k ∝
    P(outcome k)^(1/(1+r)) — rounded by largest remainders so that Σ F_k = budget exactly,
    every F_k ≥ 0, and F_0 ≥ F_1 ≥ … ≥ F_(K−1).
    """
    if int(budget) != budget or budget < 0:
        raise UsageError(f"fan-out budget must be a whole number >= 0, got {budget}")
    if not 0.0 <= a <= 1.0:
        raise UsageError(f"acceptance a must be in [0, 1], got {a}")
    if not r >= 0.0:
        raise UsageError(f"power-law exponent r must be >= 0, got {r}")
    if int(k) != k or k < 1:
        raise UsageError(f"K (draft tokens per round) must be a positive whole number, got {k}")
    weights = [p ** (1.0 / (1.0 + r)) for p in _outcome_probabilities(a, int(k))]
    scale = int(budget) / sum(weights)
    return _largest_remainder([w * scale for w in weights], int(budget))
