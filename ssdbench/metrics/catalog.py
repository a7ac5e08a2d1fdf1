"""Every figure of a run's summary, declared once: what the run table and the Markdown table show (in this
order, under `header`), what the JSON carries (the summary's columns), and what `compare --fail-on` gates.

A per-request figure (`per_request`: a column of requests.parquet) is one line here: the summary takes its
median (and its p90 where `p90`), the tables show the median, the JSON carries both, and the gate checks
it as a paired per-prompt ratio. A pooled figure (gate POOLED) is one line too: the ratio of two per-round
sums, `num` over `den`, each a column of steps.parquet or a count of ROUND_COUNTS below; the summary pools
it over the variant's rounds and the gate over paired requests. The others are computed in
metrics/summary.py (speedups) or added by the run's report (MBU, energy, a serving engine's tokens per
target pass); here they say only how they are shown and gated.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

TIMED, POOLED, OUTPUTS = "timed", "pooled", "outputs"  # how the gate decides (report/gate.py)


@dataclass(frozen=True)
class Figure:
    name: str  # the gate's name (--fail-on NAME:...); a per-request figure's requests.parquet column
    header: str | None = None  # the tables' column; None: not a column
    key: str | None = None  # the summary column its cell shows (default: name, or name_median per request)
    fmt: str = "{:.2f}"
    optional: bool = False  # only some summaries have it: the column shows where the summary does
    per_request: bool = False
    p90: bool = False  # a per-request figure whose p90 the summary gives too
    gate: str | None = None  # TIMED, POOLED or OUTPUTS; None: not gated
    is_higher_better: bool = True
    num: str = ""  # a pooled figure: the per-round counts it is the ratio of (a steps column or ROUND_COUNTS')
    den: str = ""

    @property
    def summary_key(self) -> str:
        return self.key or (f"{self.name}_median" if self.per_request else self.name)


FIGURES: tuple[Figure, ...] = (
    Figure("decode_tokens_per_s", "decode tok/s p50", per_request=True, gate=TIMED),
    Figure("speedup", "decode speedup vs ar", gate=TIMED),  # its cells and the CI's: report/render.py
    Figure("speedup_ci", "95% CI", key="speedup_low"),
    Figure("speedup_e2e", "e2e speedup vs ar", fmt="{:.2f}×"),
    Figure("acceptance_length", "accept len", gate=POOLED, num="emitted", den="rounds"),
    Figure("tokens_per_target_pass", "tok/target pass", optional=True),  # a run with serving engines
    Figure("draft_acceptance_rate", "draft accept", fmt="{:.1%}", gate=POOLED, num="accepted_of_proposed",
           den="proposed"),
    Figure("ttft_ms", "TTFT ms p50", fmt="{:.1f}", per_request=True, p90=True, gate=TIMED, is_higher_better=False),
    Figure("tpot_ms", "TPOT ms p50", fmt="{:.1f}", per_request=True, p90=True, gate=TIMED, is_higher_better=False),
    Figure("target_mbu", "target MBU", fmt="{:.0%}", optional=True),
    Figure("joules_per_token", "GPU J/token", fmt="{:.3f}", optional=True),
    Figure("cache_hit_rate", gate=POOLED, num="hits", den="known_hits"),
    Figure("outputs_match", gate=OUTPUTS),
)


def _one_per_round(steps: pd.DataFrame) -> pd.Series:
    return pd.Series(1, index=steps.index)


def _cache_hit(steps: pd.DataFrame) -> pd.Series:
    """1 where ssd's proposal was in its cache; 0 on a miss or where the round says nothing."""
    if "cache_hit" not in steps:
        return pd.Series(0, index=steps.index)
    return pd.Series(pd.array(steps["cache_hit"], dtype="boolean").fillna(False).astype(int), index=steps.index)


def _cache_hit_known(steps: pd.DataFrame) -> pd.Series:
    """1 where the round says whether ssd's cache held its proposal (ssd's own rounds only)."""
    if "cache_hit" not in steps:
        return pd.Series(0, index=steps.index)
    return pd.Series((~pd.array(steps["cache_hit"], dtype="boolean").isna()).astype(int), index=steps.index)


def _accepted_of_proposed(steps: pd.DataFrame) -> pd.Series:
    """Accepted drafts of rounds that say how many they proposed: a server's round may not, and its accepted
    count then stays out of the draft acceptance rate, as its proposal does."""
    return steps["accepted"].where(steps["proposed"].notna(), 0)


# Per-round counts beside steps.parquet's own columns (emitted, accepted, proposed): steps → one value a round.
ROUND_COUNTS = {"rounds": _one_per_round, "hits": _cache_hit, "known_hits": _cache_hit_known,
                "accepted_of_proposed": _accepted_of_proposed}


def gated() -> tuple[Figure, ...]:
    """The figures `compare --fail-on` can check. Read at call time (as `per_request` and the tables' columns
    are), so a test may declare a figure by replacing FIGURES for its duration."""
    return tuple(f for f in FIGURES if f.gate is not None)


def per_request() -> tuple[Figure, ...]:
    return tuple(f for f in FIGURES if f.per_request)


def pooled() -> tuple[Figure, ...]:
    return tuple(f for f in FIGURES if f.gate == POOLED)
