"""One self-contained HTML page: each run's settings and summary table, then the figures.

Figures are embedded as base64 PNGs (the page needs no other file) and link to the PNG
files written beside it. Skipped figures are listed with the reason.
"""

from __future__ import annotations

import base64
import html
import math
from pathlib import Path

PAGE_NAME = "report.html"

_CSS = """body{font-family:system-ui,sans-serif;margin:2em;max-width:1100px;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}th,td{border:1px solid #ccc;padding:.25em .6em;text-align:right}
th:first-child,td:first-child{text-align:left}th{background:#f3f3f3}figure{margin:1em 0}img{max-width:100%}
.skip{color:#777}.partial{color:#a15c00}.meta{color:#555;font-size:.9em}"""

_COLUMNS = (  # (header, summary column, format)
    ("variant", "label", "{}"), ("requests", "num_requests", "{}"), ("new tokens", "new_tokens", "{}"),
    ("decode tok/s p50", "decode_tokens_per_s_median", "{:.2f}"), ("speedup vs ar", "speedup", "{:.2f}×"),
    ("95% CI low", "speedup_low", "{:.2f}"), ("95% CI high", "speedup_high", "{:.2f}"),
    ("accept len (pooled)", "acceptance_length", "{:.2f}"),
    ("accept len (per-request mean)", "acceptance_length_per_request", "{:.2f}"),
    ("draft accept", "draft_acceptance_rate", "{:.1%}"), ("TTFT ms p50", "ttft_ms_median", "{:.1f}"),
    ("TPOT ms p50", "tpot_ms_median", "{:.1f}"),
)


def _cell(value, fmt: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return html.escape(fmt.format(value))


def summary_html(summary) -> str:
    """The summary DataFrame (metrics.summary.summarize) as an HTML table."""
    head = "".join(f"<th>{html.escape(h)}</th>" for h, _, _ in _COLUMNS)
    body = "".join("<tr>" + "".join(f"<td>{_cell(row[col], fmt)}</td>" for _, col, fmt in _COLUMNS) + "</tr>"
                   for _, row in summary.iterrows())
    return f"<table><tr>{head}</tr>{body}</table>"


def _settings(run) -> str:
    from ssdbench.projection import describe_hardware

    config, models = run.manifest.get("config", {}), run.manifest.get("models", {})
    items = {
        "run": run.manifest.get("run_id", Path(run.path).name), "path": str(run.path),
        "suite": run.manifest.get("suite", {}).get("name", config.get("suite")),
        "target": models.get("target", {}).get("name", config.get("target")),
        "draft": models.get("draft", {}).get("name", config.get("draft")),
        "K": config.get("k"), "batch": config.get("batch_size"), "temperature": config.get("temperature"),
        "max new tokens": config.get("max_new_tokens"), "hardware": describe_hardware(run.manifest),
    }
    return '<p class="meta">' + " · ".join(f"{html.escape(k)}: {html.escape(str(v))}" for k, v in items.items()) + "</p>"


def run_section(run, name: str) -> str:
    from ssdbench.report.render import exactness_line
    from ssdbench.metrics.summary import summarize

    summary = summarize(run.requests, run.steps)
    greedy = run.manifest.get("config", {}).get("temperature", 0) == 0
    table = summary_html(summary) if not summary.empty else "<p>No requests.</p>"
    line = exactness_line(summary, greedy=greedy, divergences=run.manifest.get("greedy_divergences")) \
        if not summary.empty else ""
    partial = (f'<p class="partial"><b>Partial run</b>: {html.escape(run.partial)}.</p>'
               if run.partial else "")
    return f"<h2>{html.escape(name)}</h2>{partial}{_settings(run)}{table}<p>{html.escape(line)}</p>"


def figure_html(plot) -> str:
    if plot.path is None:
        return f'<p class="skip">Skipped <b>{html.escape(plot.title)}</b>: {html.escape(plot.reason)}.</p>'
    data = base64.b64encode(Path(plot.path).read_bytes()).decode("ascii")
    href = html.escape(Path(plot.path).name)
    return (f'<figure><a href="{href}"><img src="data:image/png;base64,{data}" alt="{html.escape(plot.title)}"></a>'
            f"<figcaption>{html.escape(plot.title)} ({href})</figcaption></figure>")


def write_report(runs, out_dir: Path) -> tuple[Path, list]:
    """Write the PNGs and `report.html` into `out_dir` (which must exist); return the page and plots."""
    from ssdbench.report.plots import make_plots, run_names

    plots = make_plots(runs, out_dir)
    sections = "".join(run_section(run, name) for name, run in zip(run_names(runs), runs))
    figures = "".join(figure_html(plot) for plot in plots)
    title = "ssdbench report · " + ", ".join(run_names(runs))
    page = (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
            f"<style>{_CSS}</style></head><body><h1>{html.escape(title)}</h1>{sections}<h2>Figures</h2>{figures}"
            "</body></html>\n")
    path = Path(out_dir) / PAGE_NAME
    path.write_text(page, encoding="utf-8")
    return path, plots
