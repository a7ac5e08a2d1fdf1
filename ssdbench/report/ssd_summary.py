"""SSD's own figures for a run: cache hits, acceptance on hit vs miss, waiting, overlap."""

from __future__ import annotations

import pandas as pd

from ssdbench.metrics.summary import add_label, cache_hits


def round_level(steps: pd.DataFrame) -> pd.DataFrame:
    """One row per round (rows of a batch share a round's timings; t_start_ns identifies it)."""
    return steps.drop_duplicates(subset=["label", "repeat", "t_start_ns"])


def ssd_overview(steps: pd.DataFrame) -> pd.DataFrame:
    """Per ssd variant: hit rate, AL on hit/miss, wait share of the round, draft work hidden by verify."""
    steps = add_label(steps)
    steps = steps[steps["method"] == "ssd"]
    rows = []
    for label, group in steps.groupby("label", sort=False):
        rounds = round_level(group)
        wait, draft, step = rounds["wait_ms"].sum(), rounds["draft_ms"].sum(), rounds["step_ms"].sum()
        row = {"label": label, **cache_hits(group)}
        row["wait_share"] = float(wait / step) if step else float("nan")
        # the draft's busy time that the verifier did not wait for ran alongside verification
        row["overlap_share"] = float(max(draft - wait, 0.0) / draft) if draft else float("nan")
        row["fan_out_mean"] = float(group["fan_out_total"].mean())
        row["backups"] = ", ".join(f"{k} {v}" for k, v in group["backup"].value_counts().items()) or "none"
        rows.append(row)
    return pd.DataFrame(rows)
