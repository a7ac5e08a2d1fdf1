"""A run's records → one row per variant (DataFrame in, DataFrame out; rendering is elsewhere)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ssdbench.metrics import catalog
from ssdbench.metrics.stats import geometric_mean_ci
from ssdbench.metrics.variants import PAIR_KEYS, pooled_figures
from ssdbench.records.schema import COUNTED_BY_SSDBENCH
SPEEDUP_NOTE = ("decode speedup: paired geometric mean of decode tok/s ratios (prefill excluded); e2e speedup: "
                "mean whole-request tok/s (TTFT included) over the baseline's, Spec-Bench's formula.")


def variant_label(method: str, engine: str) -> str:
    """A variant's name: `sd`, `sd@hf`; transformers' baselines by method."""
    return method if engine in ("native", "transformers") else f"{method}@{engine}"


def add_label(frame: pd.DataFrame) -> pd.DataFrame:
    """`label` names a variant (`variant_label`)."""
    frame = frame.copy()
    # per row, not vectorised: an empty frame (no rounds) has untyped columns that cannot be added
    labels = [variant_label(m, e) for m, e in zip(frame["method"], frame["engine"])]
    frame["label"] = pd.Series(labels, index=frame.index, dtype=str)
    return frame


def summarize(requests: pd.DataFrame, steps: pd.DataFrame, *, baseline: str = "ar") -> pd.DataFrame:
    """Per variant: throughput, paired speedup vs `baseline`, acceptance, latency, exactness.

    Frames that already carry a `label` column keep it (compare labels variants `RUN:label`).
    """
    if "label" not in requests.columns:
        requests, steps = add_label(requests), add_label(steps)
    rows = []
    for label, group in requests.groupby("label", sort=False):
        row = {"label": label, "method": group["method"].iloc[0], "engine": group["engine"].iloc[0]}
        row.update(_throughput(group))
        row.update(_speedup(group, requests[requests["label"] == baseline]))
        row.update(end_to_end_speedup(group, requests[requests["label"] == baseline]))
        own_steps = steps[steps["label"] == label]
        row.update(_acceptance(own_steps, row["method"]))
        row["acceptance"] = acceptance_of(own_steps)
        if row["acceptance"] == "exact":
            row.update(_outputs_match(group, requests[requests["label"] == baseline]))
        else:  # drafts accepted by coin flips: the outputs are not the target's, identity means nothing
            row["outputs_match"] = float("nan")
        rows.append(row)
    return pd.DataFrame(rows)


def _throughput(group: pd.DataFrame) -> dict:
    """Counts, pooled decode speed, and every per-request figure's median (and p90) (metrics/catalog.py)."""
    row = {
        "num_requests": len(group),
        "new_tokens": int(group["new_tokens"].sum()),
        "decode_tokens_per_s_total": float((group["new_tokens"] - 1).clip(lower=0).sum() / (group["decode_ms"].sum() / 1e3))
        if group["decode_ms"].sum() > 0 else float("nan"),
    }
    for figure in catalog.per_request():
        row[figure.summary_key] = float(group[figure.name].median())
        if figure.p90:
            row[f"{figure.name}_p90"] = _quantile(group[figure.name], 0.9)
    return row


def _quantile(values: pd.Series, q: float) -> float:
    values = pd.to_numeric(values, errors="coerce").dropna()
    return float(values.quantile(q)) if len(values) else float("nan")


def _speedup(group: pd.DataFrame, baseline: pd.DataFrame) -> dict:
    """Decode-only (prefill excluded), paired per request: this variant's decode tokens/s over the
    baseline's on the same request, summarised by a geometric mean with a bootstrap interval."""
    if baseline.empty:
        return {"speedup": float("nan"), "speedup_low": float("nan"), "speedup_high": float("nan"), "speedup_pairs": 0}
    pairs = group.merge(baseline[PAIR_KEYS + ["decode_tokens_per_s"]], on=PAIR_KEYS, suffixes=("", "_base"))
    ratio = (pairs["decode_tokens_per_s"] / pairs["decode_tokens_per_s_base"]).to_numpy(dtype=float)
    interval = geometric_mean_ci(ratio)
    return {"speedup": interval.estimate, "speedup_low": interval.low, "speedup_high": interval.high, "speedup_pairs": interval.n}


def end_to_end_tokens_per_s(requests: pd.DataFrame) -> pd.Series:
    """Per request: new tokens / whole request time (TTFT included), as Spec-Bench and the paper time them."""
    seconds = (requests["ttft_ms"] + requests["decode_ms"].fillna(0.0)) / 1e3
    return requests["new_tokens"] / seconds


def end_to_end_speedup(group: pd.DataFrame, baseline: pd.DataFrame) -> dict:
    """Spec-Bench's speedup over the requests both variants ran: the mean of this variant's end-to-end
    tokens/s over the mean of the baseline's (a ratio of means, not the paired geometric mean)."""
    nan = float("nan")
    own = end_to_end_tokens_per_s(group) if len(group) else pd.Series(dtype=float)
    row = {"e2e_tokens_per_s_mean": float(own.mean()) if len(own) else nan, "speedup_e2e": nan}
    if baseline.empty or group.empty:
        return row
    pairs = group.assign(e2e=own)[PAIR_KEYS + ["e2e"]].merge(
        baseline.assign(e2e=end_to_end_tokens_per_s(baseline))[PAIR_KEYS + ["e2e"]], on=PAIR_KEYS,
        suffixes=("", "_base"))
    if len(pairs):
        row["speedup_e2e"] = float(pairs["e2e"].mean() / pairs["e2e_base"].mean())
    return row


def _acceptance(steps: pd.DataFrame, method: str) -> dict:
    """The pooled figures (metrics/catalog.py: acceptance length, draft acceptance rate, cache hit rate, ...);
    acceptance length per request, by draft position, and on ssd's hits and misses."""
    marginal, conditional = acceptance_by_position(steps)
    per_request = steps.groupby(PAIR_KEYS)["emitted"].mean() if not steps.empty else pd.Series(dtype=float)
    return {
        **cache_hits(steps),
        **pooled_figures(steps),
        "acceptance_length_per_request": float(per_request.mean()) if len(per_request) else float("nan"),
        "rounds": int(len(steps)),
        "accept_marginal": marginal,
        "accept_conditional": conditional,
    }


def own_rounds(steps: pd.DataFrame) -> pd.DataFrame:
    """The rounds ssdbench's decode loop ran and timed: a serving engine's reported rounds
    (`steps.counted_by`) carry counts but no times, batch or row, so timing code reads only these."""
    if "counted_by" not in steps.columns or steps.empty:
        return steps
    return steps[steps["counted_by"] == COUNTED_BY_SSDBENCH]


def acceptance_by_position(steps: pd.DataFrame) -> tuple[list[float], list[float]]:
    """Per draft position i = 1..K: marginal P(first i drafts all accepted) and conditional
    P(draft i accepted | drafts 1..i-1 accepted), over rounds that proposed at least i drafts
    (rounds whose proposal is unknown, a server's that gave no per-step draft count, left out)."""
    spec = steps[steps["proposed"].fillna(0) > 0] if len(steps) else steps
    if spec.empty:
        return [], []
    proposed = spec["proposed"].to_numpy(dtype=int)
    accepted = spec["accepted"].to_numpy(dtype=int)
    positions = np.arange(1, proposed.max() + 1)[:, None]  # [K, 1]
    offered = proposed[None, :] >= positions  # [K, rounds]: draft i was proposed
    reached = offered & (accepted[None, :] >= positions)  # drafts 1..i all accepted
    prior = offered & (accepted[None, :] >= positions - 1)  # drafts 1..i-1 all accepted
    with np.errstate(invalid="ignore", divide="ignore"):
        marginal = reached.sum(axis=1) / offered.sum(axis=1)
        conditional = reached.sum(axis=1) / prior.sum(axis=1)
    return [float(x) for x in marginal], [float(x) for x in conditional]


def cache_hits(steps: pd.DataFrame) -> dict:
    """SSD speculation-cache hit rate and acceptance length on hits vs misses (NaN outside ssd)."""
    nan = float("nan")
    if "cache_hit" not in steps.columns or steps.empty:
        return {"cache_hit_rate": nan, "acceptance_length_hit": nan, "acceptance_length_miss": nan}
    hit = pd.array(steps["cache_hit"], dtype="boolean")
    known = ~np.asarray(hit.isna(), dtype=bool)
    if not known.any():
        return {"cache_hit_rate": nan, "acceptance_length_hit": nan, "acceptance_length_miss": nan}
    emitted = steps["emitted"].to_numpy(dtype=float)
    is_hit = hit.fillna(False).to_numpy(dtype=bool)
    is_miss = known & ~is_hit
    return {
        "cache_hit_rate": float(is_hit.sum() / known.sum()),
        "acceptance_length_hit": float(emitted[is_hit].mean()) if is_hit.any() else nan,
        "acceptance_length_miss": float(emitted[is_miss].mean()) if is_miss.any() else nan,
    }


def acceptance_of(steps: pd.DataFrame) -> str:
    """How a variant's rounds accepted drafts: `exact`, or the synthetic setting (steps.acceptance)."""
    if "acceptance" not in steps.columns:  # frames built without the column: the exact rule
        return "exact"
    synthetic = [a for a in steps["acceptance"].dropna().unique() if a != "exact"]
    return str(synthetic[0]) if synthetic else "exact"


def _outputs_match(group: pd.DataFrame, baseline: pd.DataFrame) -> dict:
    """Fraction of requests whose output token ids equal the baseline's on the same request."""
    if baseline.empty:
        return {"outputs_match": float("nan")}
    pairs = group.merge(baseline[PAIR_KEYS + ["output_token_ids"]], on=PAIR_KEYS, suffixes=("", "_base"))
    same = [list(a) == list(b) for a, b in zip(pairs["output_token_ids"], pairs["output_token_ids_base"])]
    return {"outputs_match": float(np.mean(same)) if same else float("nan")}
