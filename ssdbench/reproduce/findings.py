"""A finding: one claim of the paper, the figure measured for it with a 95% interval, and the verdict.

Verdicts compare an interval with the threshold the claim names: `holds` when the whole interval lies on
the claim's side, `does not hold` when it lies wholly on the other side, `inconclusive` otherwise, always
with the reason. A study that cannot measure a claim on this pair says why, as an inconclusive finding.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

HOLDS, FAILS, INCONCLUSIVE = "holds", "does not hold", "inconclusive"
FINDINGS_NAME = "findings.parquet"


@dataclass(frozen=True)
class Finding:
    study: str
    claim: str
    measured: str  # what the figure is, e.g. "power-law exponent r of 1 - hit(F) ~ F^-r"
    estimate: float
    low: float  # the 95% interval; NaN where none can be given (the reason says why)
    high: float
    verdict: str
    reason: str
    paper: str = ""  # the paper's figure, where it gives one
    settings: dict = field(default_factory=dict)  # the settings the figure was measured at

    def row(self) -> dict:
        return {**asdict(self), "settings": json.dumps(self.settings, sort_keys=True, default=str)}


def judge_above(low: float, high: float, threshold: float, *, above: str, below: str) -> tuple[str, str]:
    """The verdict on a claim that the figure exceeds `threshold`, from its interval [low, high]."""
    if not (math.isfinite(low) and math.isfinite(high)):
        return INCONCLUSIVE, "no interval: too few measurements"
    if low > threshold:
        return HOLDS, above
    if high < threshold:
        return FAILS, below
    return INCONCLUSIVE, f"the interval {low:.3g}-{high:.3g} straddles {threshold:g}"


def unmeasurable(study: str, claim: str, measured: str, reason: str, *, paper: str = "",
                 settings: dict | None = None) -> Finding:
    nan = float("nan")
    return Finding(study, claim, measured, nan, nan, nan, INCONCLUSIVE, reason, paper, settings or {})


def write_findings(out: Path, findings: list[Finding]) -> Path:
    """DIR/findings.parquet, written whole or not at all (a temporary file, then a rename)."""
    import pandas as pd

    path = out / FINDINGS_NAME
    tmp = out / f".{FINDINGS_NAME}.tmp"
    pd.DataFrame([f.row() for f in findings], columns=list(Finding.__dataclass_fields__)).to_parquet(tmp, index=False)
    os.replace(tmp, path)
    return path


def format_figure(finding: Finding) -> str:
    if not math.isfinite(finding.estimate):
        return "-"
    interval = f" [{finding.low:.3g}, {finding.high:.3g}]" if math.isfinite(finding.low) else ""
    return f"{finding.estimate:.3g}{interval}"


def markdown_table(findings: list[Finding]) -> str:
    lines = ["| study | claim | paper | measured | figure (95% CI) | verdict | why |", "| --- " * 7 + "|"]
    for f in findings:
        cells = (f.study, f.claim, f.paper or "-", f.measured, format_figure(f), f.verdict, f.reason)
        lines.append("| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines)
