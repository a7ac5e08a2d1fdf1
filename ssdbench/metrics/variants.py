"""A run's records split by variant (`sd`, `sd@vllm`, ...), with the per-round counts that pooled figures
(metrics/catalog.py) are ratios of: what the summary and the gate both read."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from ssdbench.metrics import catalog

PAIR_KEYS = ["suite", "prompt_id", "repeat"]


@dataclass(frozen=True)
class VariantRecords:
    label: str
    requests: pd.DataFrame  # this variant's rows of requests.parquet
    steps: pd.DataFrame  # this variant's rounds (steps.parquet)

    def counts_per_request(self) -> pd.DataFrame:
        """Per request: its pair keys, temperature, seed and outputs, and the sum over its rounds of every
        count a pooled figure is made of (0 for a request without rounds)."""
        columns = count_columns()
        sums = round_counts(self.steps).groupby(PAIR_KEYS)[columns].sum()
        keep = self.requests[PAIR_KEYS + ["temperature", "seed", "output_token_ids"]]
        return keep.merge(sums.reset_index(), on=PAIR_KEYS, how="left").fillna(dict.fromkeys(columns, 0))


def count_columns() -> list[str]:
    """The counts the pooled figures name, and `proposed` (a variant that proposed nothing is not gated)."""
    names = [name for f in catalog.pooled() for name in (f.num, f.den)] + ["proposed"]
    return list(dict.fromkeys(names))


def round_counts(steps: pd.DataFrame) -> pd.DataFrame:
    """`steps` with every count of catalog.ROUND_COUNTS as a column; missing steps columns count 0."""
    counts = {name: count(steps) for name, count in catalog.ROUND_COUNTS.items()}
    frame = steps.assign(**counts)
    for name in count_columns():
        if name not in frame:
            frame[name] = 0
    return frame


def pooled_figures(steps: pd.DataFrame) -> dict[str, float]:
    """Every pooled figure over `steps`: Σnum / Σden (NaN where the denominator sums to 0)."""
    if steps.empty:
        return {f.name: float("nan") for f in catalog.pooled()}
    counts = round_counts(steps)
    values = {}
    for figure in catalog.pooled():
        den = float(pd.to_numeric(counts[figure.den], errors="coerce").sum())
        num = float(pd.to_numeric(counts[figure.num], errors="coerce").sum())
        values[figure.name] = num / den if den else float("nan")
    return values


def split_variants(requests: pd.DataFrame, steps: pd.DataFrame) -> dict[str, VariantRecords]:
    """Labelled frames (metrics/summary.py:add_label) → one VariantRecords per label, in the requests' order."""
    return {label: VariantRecords(label, group, steps[steps["label"] == label])
            for label, group in requests.groupby("label", sort=False)}
