"""Throughput against latency per method and per serving endpoint at each concurrency, and the Pareto
frontier of a sweep.

Both axes mean the same for a method and for an endpoint: throughput is decode tokens (the first token
of each request, drawn by the prefill, left out) per second of decode wall time, and latency is the
median per-request TPOT. A method's batch shares its rounds, so their time counts once; an endpoint's
concurrent requests overlap in time, so its decode wall time is the union of its requests' decode
windows (first token to end, placed on one clock by each request's `endpoints.t_start_ns`): at
concurrency 1 the sum of decode times, at N the span in which any of its requests was decoding.
"""

from __future__ import annotations

import pandas as pd

from ssdbench.metrics.summary import add_label

ENDPOINT_KEYS = ["method", "engine", "suite", "prompt_id", "request_idx", "repeat"]


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


def decode_windows(requests: pd.DataFrame, endpoints: pd.DataFrame) -> pd.DataFrame:
    """Per endpoint request that succeeded: its decode window [first token, end] in time.time_ns(), from
    the wall clock at which it was sent (endpoints.t_start_ns) plus its TTFT and decode time."""
    sent = endpoints[endpoints["status"] == "ok"][ENDPOINT_KEYS + ["t_start_ns", "concurrency"]]
    joined = requests.merge(sent, on=ENDPOINT_KEYS, how="inner")
    first = joined["t_start_ns"].astype("float64") + joined["ttft_ms"].astype("float64") * 1e6
    return joined.assign(decode_start_ns=first, decode_end_ns=first + joined["decode_ms"].fillna(0.0) * 1e6)


def union_seconds(starts, ends) -> float:
    """Length of the union of the intervals [start, end] (ns), in seconds: overlapping time counts once."""
    total, reach = 0.0, float("-inf")
    for start, end in sorted(zip(starts, ends)):
        if end <= reach:
            continue
        total += end - max(start, reach)
        reach = end
    return total / 1e9


def endpoint_throughput_latency(requests: pd.DataFrame, endpoints: pd.DataFrame | None) -> pd.DataFrame:
    """One point per endpoint variant (NAME@endpoint-cN): its concurrency, total decode tokens/s over the
    union of its requests' decode windows, and the median per-request TPOT (ms/token)."""
    columns = ["label", "method", "concurrency", "requests", "total_tokens_per_s", "latency_ms"]
    if endpoints is None or endpoints.empty or requests.empty:
        return pd.DataFrame(columns=columns)
    rows = []
    for (method, engine), group in decode_windows(requests, endpoints).groupby(["method", "engine"], sort=False):
        seconds = union_seconds(group["decode_start_ns"], group["decode_end_ns"])
        tokens = float((group["new_tokens"] - 1).clip(lower=0).sum())
        rows.append({"label": add_label(group.head(1))["label"].iloc[0], "method": method,
                     "concurrency": int(group["concurrency"].iloc[0]), "requests": len(group),
                     "total_tokens_per_s": tokens / seconds if seconds > 0 else float("nan"),
                     "latency_ms": float(group["tpot_ms"].median())})
    return pd.DataFrame(rows, columns=columns)
