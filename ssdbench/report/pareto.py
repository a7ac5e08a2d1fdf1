"""Throughput against latency per method, and the Pareto frontier of a sweep."""

from __future__ import annotations

import pandas as pd

from ssdbench.metrics.summary import add_label


def batch_key(group: pd.DataFrame) -> pd.Series:
    """Which batch each request of one variant ran in, from the batch size it recorded.

    Batches are consecutive request indices, the first one full; a request decoded alone
    (batch 1: every transformers baseline request) is its own batch, never grouped.
    """
    size = int(group["batch_size"].max())
    return (group["request_idx"] // size).where(group["batch_size"] > 1, -1 - group["request_idx"])


def throughput_latency(requests: pd.DataFrame) -> pd.DataFrame:
    """Per variant: total decode tokens/s over batches, and the median per-request decode latency."""
    requests = add_label(requests)
    rows = []
    for label, group in requests.groupby("label", sort=False):
        group = group.assign(batch=batch_key(group))
        per_batch = group.groupby(["repeat", "batch"]).agg(tokens=("new_tokens", lambda s: (s - 1).clip(lower=0).sum()),
                                                           decode_ms=("decode_ms", "max"))
        total_s = per_batch["decode_ms"].sum() / 1e3
        rows.append({"label": label, "method": group["method"].iloc[0],
                     "throughput_tokens_per_s": float(per_batch["tokens"].sum() / total_s) if total_s else float("nan"),
                     "latency_ms_p50": float(group["decode_ms"].median())})
    return pd.DataFrame(rows)


def mark_pareto(points: pd.DataFrame) -> pd.DataFrame:
    """Add `on_frontier`: no other point of the same method has both more throughput and less latency."""
    points = points.copy()
    points["on_frontier"] = False
    for _, group in points.groupby("method"):
        for i, row in group.iterrows():
            better = group[(group["throughput_tokens_per_s"] >= row["throughput_tokens_per_s"])
                           & (group["latency_ms_p50"] <= row["latency_ms_p50"])
                           & ((group["throughput_tokens_per_s"] > row["throughput_tokens_per_s"])
                              | (group["latency_ms_p50"] < row["latency_ms_p50"]))]
            points.loc[i, "on_frontier"] = better.empty
    return points
