"""Text renderings of a comparison: compact cells (shared with the Rich table), Markdown for a
PR comment, and a JSON-ready dict for scripts."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pandas as pd

from ssdbench.report.compare import Comparison
from ssdbench.metrics.summary import SPEEDUP_NOTE

HEADERS = ("run", "variant", "req", "decode tok/s p50", "decode speedup [95% CI]", "e2e speedup", "pairs", "accept len pooled/req",
           "accept@i marginal", "accept@i conditional", "cache hit (AL hit/miss)", "TTFT ms p50/p90",
           "TPOT ms p50/p90", "outputs = baseline")


def _is_missing(value: object) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _num(value: object, fmt: str = "{:.2f}") -> str:
    return "–" if _is_missing(value) else fmt.format(value)


def _pair(a: object, b: object, fmt: str = "{:.1f}") -> str:
    return "–" if _is_missing(a) and _is_missing(b) else f"{_num(a, fmt)} / {_num(b, fmt)}"


def _positions(values: Sequence[float]) -> str:
    values = list(values) if values is not None else []
    return " ".join(_num(v) for v in values) if values else "–"


def _speedup(row: pd.Series, baseline: str | None) -> str:
    if row["label"] == baseline:
        return "1.00× (baseline)"
    if _is_missing(row["speedup"]):
        return "–"
    interval = "" if _is_missing(row["speedup_low"]) else f" [{row['speedup_low']:.2f}–{row['speedup_high']:.2f}]"
    return f"{row['speedup']:.2f}×{interval}"


def _e2e_speedup(row: pd.Series, baseline: str | None) -> str:
    if row["label"] == baseline:
        return "1.00× (baseline)"
    return _num(row.get("speedup_e2e"), "{:.2f}×")


def _hits(row: pd.Series) -> str:
    if _is_missing(row.get("cache_hit_rate")):
        return "–"
    return f"{row['cache_hit_rate']:.0%} ({_num(row['acceptance_length_hit'])}/{_num(row['acceptance_length_miss'])})"


def _outputs(row: pd.Series, baseline: str | None) -> str:
    if baseline is None:
        return "–"
    if row["label"] == baseline:
        return "(baseline)"
    if row.get("acceptance", "exact") != "exact":
        return "n/a (synthetic acceptance)"
    if row["outputs_match"] is None:  # the variant or the baseline sampled
        return "n/a (sampled)"
    return _num(row["outputs_match"], "{:.0%}")


def cells(row: pd.Series, baseline: str | None) -> list[str]:
    """One comparison row as the text of each column in HEADERS."""
    return [
        str(row["run"]), row["variant"], str(row["num_requests"]), _num(row["decode_tokens_per_s_median"]),
        _speedup(row, baseline), _e2e_speedup(row, baseline), str(row["speedup_pairs"]) if baseline else "–",
        _pair(row["acceptance_length"], row["acceptance_length_per_request"], "{:.2f}"),
        _positions(row["accept_marginal"]), _positions(row["accept_conditional"]), _hits(row),
        _pair(row["ttft_ms_median"], row["ttft_ms_p90"]), _pair(row["tpot_ms_median"], row["tpot_ms_p90"]),
        _outputs(row, baseline),
    ]


def run_lines(comparison: Comparison) -> list[str]:
    """`run i: path (run id, suite, commit)` for the legend above a table."""
    lines = []
    for index, run in enumerate(comparison.runs):
        m = run.manifest
        commit = (((m.get("environment") or {}).get("tool") or {}).get("git") or {}).get("commit")
        suite = (m.get("suite") or {}).get("name", "?")
        lines.append(f"run {index}: {run.path} ({m.get('run_id', '?')}, suite {suite}"
                     f"{', commit ' + commit[:10] if commit else ''})"
                     + (f" PARTIAL: {run.partial}" if run.partial else ""))
    return lines


def to_markdown(comparison: Comparison, verdicts: Sequence = (), headline: str | None = None) -> str:
    """GitHub-flavoured Markdown: legend, mismatch warnings, the table, notes, gate verdicts."""
    out = ["### ssdbench compare", ""]
    out += [f"- {line}" for line in run_lines(comparison)]
    for line in comparison.warnings:
        out += ["", f"> **Warning:** {line}"]
    if comparison.mismatches:
        out += ["", "> **Warning: the runs differ in what makes a comparison fair (--allow-mismatch):**"]
        out += [f"> - {line}" for line in comparison.mismatches]
    out += ["", "| " + " | ".join(HEADERS) + " |", "|" + "|".join("---" for _ in HEADERS) + "|"]
    for _, row in comparison.rows.iterrows():
        out.append("| " + " | ".join(c.replace("|", "\\|") for c in cells(row, comparison.baseline)) + " |")
    out += ["", f"_{SPEEDUP_NOTE}_"]
    if comparison.notes:
        out += [""] + [f"_{note}_" for note in comparison.notes]
    if headline:
        out += ["", f"**{headline}**", ""]
        out += [f"- `{v.check}` run {v.run} {v.variant}: **{v.status}**: {v.detail}" for v in verdicts]
    return "\n".join(out).rstrip() + "\n"


def _plain(value: object) -> object:
    if isinstance(value, float) and math.isnan(value):
        return None
    if hasattr(value, "item"):  # numpy scalars
        return _plain(value.item())
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def to_payload(comparison: Comparison, verdicts: Sequence = (), exit_code: int | None = None) -> dict:
    """Everything in the table (NaN as null), plus the mismatches, notes and gate verdicts."""
    rows = [{k: _plain(v) for k, v in row.items()} for row in comparison.rows.to_dict(orient="records")]
    return {
        "runs": [{"index": i, "path": str(r.path), "run_id": r.manifest.get("run_id"), "partial": r.partial}
                 for i, r in enumerate(comparison.runs)],
        "baseline": comparison.baseline, "mismatches": comparison.mismatches, "notes": comparison.notes,
        "warnings": comparison.warnings, "rows": rows,
        "gate": None if exit_code is None else {
            "exit_code": exit_code,
            "checks": [{"check": v.check, "run": v.run, "variant": v.variant, "status": v.status, "detail": v.detail}
                       for v in verdicts]},
    }
