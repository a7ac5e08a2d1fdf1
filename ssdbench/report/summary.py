"""A run's records → one row per variant (DataFrame in, DataFrame out; rendering is elsewhere)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ssdbench.report.stats import geometric_mean_ci

PAIR_KEYS = ["suite", "prompt_id", "repeat"]


def add_label(frame: pd.DataFrame) -> pd.DataFrame:
    """`label` names a variant: `sd`, `sd@hf`; transformers' baselines by method."""
    frame = frame.copy()
    native = frame["engine"].isin(["native", "transformers"])
    frame["label"] = np.where(native, frame["method"], frame["method"] + "@" + frame["engine"])
    return frame


def summarize(requests: pd.DataFrame, steps: pd.DataFrame, *, baseline: str = "ar") -> pd.DataFrame:
    """Per variant: throughput, paired speedup vs `baseline`, acceptance, latency, exactness."""
    requests, steps = add_label(requests), add_label(steps)
    rows = []
    for label, group in requests.groupby("label", sort=False):
        row = {"label": label, "method": group["method"].iloc[0], "engine": group["engine"].iloc[0]}
        row.update(_throughput(group))
        row.update(_speedup(group, requests[requests["label"] == baseline]))
        row.update(_acceptance(steps[steps["label"] == label], row["method"]))
        row.update(_outputs_match(group, requests[requests["label"] == baseline]))
        rows.append(row)
    return pd.DataFrame(rows)


def _throughput(group: pd.DataFrame) -> dict:
    return {
        "num_requests": len(group),
        "new_tokens": int(group["new_tokens"].sum()),
        "decode_tokens_per_s_median": float(group["decode_tokens_per_s"].median()),
        "decode_tokens_per_s_total": float((group["new_tokens"] - 1).clip(lower=0).sum() / (group["decode_ms"].sum() / 1e3))
        if group["decode_ms"].sum() > 0 else float("nan"),
        "ttft_ms_median": float(group["ttft_ms"].median()),
        "tpot_ms_median": float(group["tpot_ms"].median()),
    }


def _speedup(group: pd.DataFrame, baseline: pd.DataFrame) -> dict:
    """Paired per request: this variant's decode tokens/s over the baseline's on the same request."""
    if baseline.empty:
        return {"speedup": float("nan"), "speedup_low": float("nan"), "speedup_high": float("nan"), "speedup_pairs": 0}
    pairs = group.merge(baseline[PAIR_KEYS + ["decode_tokens_per_s"]], on=PAIR_KEYS, suffixes=("", "_base"))
    ratio = (pairs["decode_tokens_per_s"] / pairs["decode_tokens_per_s_base"]).to_numpy(dtype=float)
    interval = geometric_mean_ci(ratio)
    return {"speedup": interval.estimate, "speedup_low": interval.low, "speedup_high": interval.high, "speedup_pairs": interval.n}


def _acceptance(steps: pd.DataFrame, method: str) -> dict:
    """Acceptance length pooled over rounds (canonical) and per request; draft acceptance rate."""
    if steps.empty:
        return {"acceptance_length": float("nan"), "acceptance_length_per_request": float("nan"),
                "draft_acceptance_rate": float("nan"), "rounds": 0}
    per_request = steps.groupby(["prompt_id", "repeat"])["emitted"].mean()
    proposed = steps["proposed"].sum()
    return {
        "acceptance_length": float(steps["emitted"].mean()),
        "acceptance_length_per_request": float(per_request.mean()),
        "draft_acceptance_rate": float(steps["accepted"].sum() / proposed) if proposed else float("nan"),
        "rounds": int(len(steps)),
    }


def _outputs_match(group: pd.DataFrame, baseline: pd.DataFrame) -> dict:
    """Fraction of requests whose output token ids equal the baseline's on the same request."""
    if baseline.empty:
        return {"outputs_match": float("nan")}
    pairs = group.merge(baseline[PAIR_KEYS + ["output_token_ids"]], on=PAIR_KEYS, suffixes=("", "_base"))
    same = [list(a) == list(b) for a, b in zip(pairs["output_token_ids"], pairs["output_token_ids_base"])]
    return {"outputs_match": float(np.mean(same)) if same else float("nan")}
