"""A RunReport (report/run_report.py) as `ssdbench run` prints it: a Rich table, JSON or Markdown."""

from __future__ import annotations

from rich.console import Console
from rich.text import Text

from ssdbench.metrics.summary import SPEEDUP_NOTE
from ssdbench.report.render import (MODEL_CHECK_HEADERS, MODEL_CHECK_TITLE, model_check_cells, model_check_table,
                                    print_summary, summary_cells)
from ssdbench.report.run_report import RunReport
from ssdbench.report.ssd_summary import chain_lines


def print_table(report: RunReport, console: Console) -> None:
    print_summary(report.summary, title=report.title, greedy=report.greedy, console=console, ssd=report.ssd,
                  divergences=report.divergences)
    for line in (*report.warnings, *chain_lines(report.chain), *report.notes):
        console.print(line)
    if _has_prediction(report):
        console.print(model_check_table(report.prediction))
    console.print(f"Records: {report.run_dir}")


def payload(report: RunReport) -> dict:
    """The JSON form; the warnings in plain text (the table's console gets them too, on stderr)."""
    return {"run_dir": str(report.run_dir), "acceptance": report.acceptance,
            "summary": report.summary.to_dict(orient="records"),
            "ssd": [] if report.ssd is None else report.ssd.to_dict(orient="records"), "ssd_chain": report.chain,
            "exactness": report.exactness, "greedy_divergences": report.divergences, "prediction": report.prediction,
            "warnings": [_plain(w) for w in report.warnings], "notes": [_plain(n) for n in report.notes]}


def markdown(report: RunReport) -> str:
    """For a pull request or a notebook: the summary table, the exactness line, the notes."""
    headers, rows = summary_cells(report.summary)
    lines = [f"**{report.title}**", "", *_table(headers, rows), "", SPEEDUP_NOTE, "", report.exactness]
    if report.ssd is not None and not report.ssd.empty:
        ssd_headers = ["method", "cache hit rate", "branches/row", "backups on miss"]
        ssd_rows = [[row["label"], f"{row['cache_hit_rate']:.1%}", f"{row['fan_out_mean']:.1f}", str(row["backups"])]
                    for _, row in report.ssd.iterrows()]
        lines += ["", *_table(ssd_headers, ssd_rows)]
    notes = [*report.warnings, *chain_lines(report.chain), *report.notes]
    if notes:
        lines += ["", *(f"- {_plain(n)}" for n in notes)]
    if _has_prediction(report):
        lines += ["", MODEL_CHECK_TITLE + ":", "", *_table(list(MODEL_CHECK_HEADERS), model_check_cells(report.prediction))]
    lines += ["", f"Records: `{report.run_dir}`"]
    return "\n".join(lines) + "\n"


def _has_prediction(report: RunReport) -> bool:
    labels = [row["label"] for row in report.prediction]
    return "ar" in labels and any(label != "ar" for label in labels)


def _table(headers: list[str], rows: list[list[str]]) -> list[str]:
    cell = lambda text: str(text).replace("|", "\\|")  # noqa: E731
    return (["| " + " | ".join(map(cell, headers)) + " |", "|" + "---|" * len(headers)]
            + ["| " + " | ".join(map(cell, r)) + " |" for r in rows])


def _plain(markup: str) -> str:
    return Text.from_markup(markup).plain
