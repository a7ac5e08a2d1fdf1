"""Rich rendering of a run's summary: one row per variant, then the exactness line."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pandas as pd
from rich.console import Console
from rich.table import Table

from ssdbench.metrics import catalog
from ssdbench.metrics.catalog import Figure
from ssdbench.metrics.summary import SPEEDUP_NOTE


PASSES_NOTE = ("accept len: tokens per verify step; a serving engine's counts only the steps that drafted, as vLLM "
               "and aiperf count it. tok/target pass: decode tokens over the target's forward passes (a server's: "
               "completion tokens less its accepted drafts), the figure to compare between methods and servers.")


def _num(value: float, fmt: str = "{:.2f}") -> str:
    return "–" if value is None or (isinstance(value, float) and math.isnan(value)) else fmt.format(value)


def _speedup_cells(row: pd.Series) -> tuple[str, str]:
    if math.isnan(row["speedup"]):
        return "–", ""
    if math.isnan(row["speedup_low"]):
        return f"{row['speedup']:.2f}×", ""
    return f"{row['speedup']:.2f}×", f"{row['speedup_low']:.2f}–{row['speedup_high']:.2f}"


@dataclass(frozen=True)
class SummaryColumn:
    """One column of the run summary: its header, its cell for a variant's row, whether a summary has it."""

    header: str
    cell: Callable[[pd.Series], str]
    shown: Callable[[pd.DataFrame], bool] = lambda summary: True


IDENTITY_COLUMNS = (
    SummaryColumn("method", lambda r: r["label"]),
    SummaryColumn("requests", lambda r: str(r["num_requests"])),
    SummaryColumn("new tokens", lambda r: str(r["new_tokens"])),
)
SPECIAL_CELLS = {  # cells a format string cannot make: the speedup, and its interval beside it
    "speedup": lambda r: _speedup_cells(r)[0], "speedup_ci": lambda r: _speedup_cells(r)[1]}


def _figure_column(figure: Figure) -> SummaryColumn:
    key = figure.summary_key
    cell = SPECIAL_CELLS.get(figure.name) or (lambda r: _num(r[key], figure.fmt))
    shown = (lambda s: key in s.columns) if figure.optional else (lambda s: True)
    return SummaryColumn(figure.header, cell, shown)


def summary_columns() -> tuple[SummaryColumn, ...]:
    """What the Rich table and the Markdown one show: the variant, then every figure with a header
    (metrics/catalog.py, read at call time)."""
    return IDENTITY_COLUMNS + tuple(_figure_column(f) for f in catalog.FIGURES if f.header is not None)


def summary_cells(summary: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """(headers, one row of cells per variant) of the columns this summary has."""
    columns = [c for c in summary_columns() if c.shown(summary)]
    return [c.header for c in columns], [[c.cell(row) for c in columns] for _, row in summary.iterrows()]


def summary_table(summary: pd.DataFrame, *, title: str) -> Table:
    table = Table(title=title, title_justify="left")
    headers, rows = summary_cells(summary)
    for name in headers:
        table.add_column(name, justify="left" if name == "method" else "right", no_wrap=name == "method")
    for cells in rows:
        table.add_row(*cells)
    return table


def exactness_line(summary: pd.DataFrame, *, greedy: bool, divergences: list[dict] | str | None = None) -> str:
    """Whether every variant's outputs equalled `ar`'s, or why that is not the check under sampling;
    `divergences` (the manifest's greedy_divergences) says whether each departure was a near-tie."""
    others = summary[summary["label"] != "ar"]
    if "acceptance" in others.columns and (others["acceptance"] != "exact").any():
        synthetic = others[others["acceptance"] != "exact"]
        return (f"Outputs: n/a (synthetic acceptance, {synthetic['acceptance'].iloc[0]}): "
                f"{', '.join(synthetic['label'])} accepted drafts by coin flips, so their outputs are NOT the "
                "target's and are not compared with ar.")
    if not greedy:
        return ("Sampling run: outputs differ by design; exactness under sampling is checked by the "
                "test suite's goodness-of-fit tests, not per run.")
    if "ar" not in set(summary["label"]) or others.empty:
        return "Outputs: nothing to compare against `ar` in this run."
    on_text = others["identity_on"] == "text" if "identity_on" in others else pd.Series(False, others.index)
    parts = [f"{r['label']} {r['outputs_match']:.0%}" + (" on text" if text else "")
             for (_, r), text in zip(others.iterrows(), on_text)]
    verdict = "identical to ar" if (others["outputs_match"] == 1).all() else "NOT all identical to ar"
    line = f"Greedy outputs {verdict} (share of requests token-identical: {', '.join(parts)})."
    if on_text.any():
        line += (f" {', '.join(others['label'][on_text])}: judged on the text, as the server sent no token ids "
                 "(re-tokenised text may give other ids for the same text).")
    if isinstance(divergences, str):
        return f"{line} Departures {divergences}."
    return f"{line} {divergence_note(divergences or [])}".rstrip()


def divergence_note(divergences: Sequence[dict]) -> str:
    """One line for the run's exactness statement ('' when nothing departed)."""
    if not divergences:
        return ""
    ties = [d for d in divergences if d["near_tie"] is True]
    real = [d for d in divergences if d["near_tie"] is False]
    unverifiable = [d for d in divergences if d["near_tie"] is None]
    parts = []
    if ties:
        worst = max(ties, key=lambda d: abs(d["margin"]))
        parts.append(f"{len(ties)} at near-ties the dtype cannot resolve ({_labels(ties)}; widest margin "
                     f"{abs(worst['margin']):.3g} ≤ tolerance {worst['tolerance']:.3g})")
    if real:
        widest = max(real, key=lambda d: abs(d["margin"]))
        parts.append(f"{len(real)} NOT near-ties ({_labels(real)}; widest: prompt {widest['prompt_id']} token "
                     f"{widest['position']}, margin {widest['margin']:.3g} > tolerance {widest['tolerance']:.3g})")
    if unverifiable:
        parts.append(f"{len(unverifiable)} unverifiable ({_labels(unverifiable)}: the server reports no float dtype "
                     "to bound its roundings with, and ssdbench's own bound is its run's dtype)")
    return f"Requests departing from ar: {'; '.join(parts)}."


def _labels(divergences: Sequence[dict]) -> str:
    return ", ".join(dict.fromkeys(d["label"] for d in divergences))


def ssd_table(overview: pd.DataFrame) -> Table:
    table = Table(title="ssd: speculation cache and overlap", title_justify="left")
    for name in ("method", "cache hit rate", "accept len on hit", "accept len on miss", "wait share of round",
                 "draft work overlapped", "branches/row", "backups on miss"):
        table.add_column(name, justify="left" if name in ("method", "backups on miss") else "right")
    for _, row in overview.iterrows():
        table.add_row(row["label"], _num(row["cache_hit_rate"], "{:.1%}"), _num(row["acceptance_length_hit"]),
                      _num(row["acceptance_length_miss"]), _num(row["wait_share"], "{:.1%}"),
                      _num(row["overlap_share"], "{:.1%}"), _num(row["fan_out_mean"], "{:.1f}"), row["backups"])
    return table


def print_summary(summary: pd.DataFrame, *, title: str, greedy: bool, console: Console | None = None,
                  ssd: pd.DataFrame | None = None, divergences: list[dict] | str | None = None) -> None:
    console = console or Console()
    if not console.is_terminal and console.width < 140:  # pipes and CI logs: no wrapped cells
        console.width = 140
    console.print(summary_table(summary, title=title))
    if ssd is not None and not ssd.empty:
        console.print(ssd_table(ssd))
    console.print(SPEEDUP_NOTE)
    if "tokens_per_target_pass" in summary.columns:
        console.print(PASSES_NOTE)
    console.print(exactness_line(summary, greedy=greedy, divergences=divergences))


MODEL_CHECK_TITLE = ("Speedup predicted from calibrated forward costs, draft events and acceptance vs measured "
                     "(gap > 15% flagged; 'accounting check': inputs are the variant's own round times)")
MODEL_CHECK_HEADERS = ("method", "K", "accept/token", "hit rate", "basis", "predicted", "measured", "gap")


def model_check_cells(rows: list[dict]) -> list[list[str]]:
    """docs/DESIGN.md §7.5's formulas (Theorem 7 for ssd) fed costs measured apart from the rounds they predict:
    a row of cells per method beside ar (MODEL_CHECK_HEADERS)."""
    return [[row["label"], str(row["k"]), _num(row["a"], "{:.3f}"), _num(row["hit_rate"], "{:.1%}"), row["basis"],
             _num(row["speedup_predicted"], "{:.2f}×"), _num(row["speedup_measured"], "{:.2f}×"),
             _num(row["gap"], "{:+.0%}") + (" !" if row["is_flagged"] else "")]
            for row in rows if row["label"] != "ar"]


def model_check_table(rows: list[dict]) -> Table:
    table = Table(title=MODEL_CHECK_TITLE, title_justify="left")
    for name in MODEL_CHECK_HEADERS:
        table.add_column(name, justify="left" if name in ("method", "basis") else "right")
    for cells in model_check_cells(rows):
        table.add_row(*cells)
    return table
