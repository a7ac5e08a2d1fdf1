"""`ssdbench report DIR` on a `reproduce` folder: the findings table at the top, then one figure per study in
the paper's form, drawn from DIR/findings.parquet (whose figures and settings `reproduce` computed from the
recorded rounds).

Figures: miss rate against fan-out on log-log axes with the fitted power law (fan-out); hit rate and
acceptance against C (saguaro); fast's tokens/s over jit's against batch size (backups); tokens/s against
TPOT per method (pareto); each other study's figures with their intervals.
"""

from __future__ import annotations

import html
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from ssdbench.report.html import _CSS, PAGE_NAME, figure_html
from ssdbench.report.plots import Plot

FINDINGS_NAME = "findings.parquet"
COLOURS = {"holds": "#1a7f37", "does not hold": "#b42318", "inconclusive": "#9a6700"}


def is_findings_dir(path: Path) -> bool:
    return (Path(path) / FINDINGS_NAME).is_file()


def read_findings(path: Path) -> pd.DataFrame:
    frame = pd.read_parquet(Path(path) / FINDINGS_NAME)
    return frame.assign(settings=[json.loads(s) for s in frame["settings"]])


def _fan_out(ax, rows: pd.DataFrame) -> str | None:
    drawn = False
    for _, row in rows.iterrows():
        s = row["settings"]
        if not s.get("fan_outs"):
            continue
        f, miss, w = (np.array(s[k], dtype=float) for k in ("fan_outs", "hit_rates", "rounds"))
        miss = 1.0 - miss
        if not (miss > 0).any():  # nothing to place on log axes: say so in the legend
            ax.plot([], [], " ", label=f"T={s['temperature']:g}: no miss at any F")
            continue
        dots = ax.scatter(f, miss, label=f"T={s['temperature']:g}")
        drawn = True
        usable = miss > 0
        if usable.sum() >= 2 and math.isfinite(row["estimate"]):
            slope, intercept = np.polyfit(np.log(f[usable]), np.log(miss[usable]), 1, w=np.sqrt(w[usable]))
            grid = np.geomspace(f.min(), f.max(), 30)
            ax.plot(grid, np.exp(intercept) * grid ** slope, color=dots.get_facecolor()[0],
                    label=f"T={s['temperature']:g} fit r={-slope:.2f}, R²={s.get('r2', float('nan')):.2f}")
    if not drawn:
        return "no fan-out recorded"
    ax.set(xscale="log", yscale="log", xlabel="fan-out F", ylabel="miss rate 1 - hit(F)")
    ax.legend()
    return None


def _saguaro(ax, rows: pd.DataFrame) -> str | None:
    s = rows.iloc[0]["settings"]
    if not s.get("C"):
        return "no C recorded"
    ax.plot(s["C"], s["hit_rates"], marker="o", label="cache hit rate")
    ax.plot(s["C"], s["acceptance"], marker="s", label="acceptance")
    ax.set(xlabel="Saguaro C", ylabel="rate", ylim=(0, 1.05))
    ax.invert_xaxis()
    ax.legend()
    return None


def _backups(ax, rows: pd.DataFrame) -> str | None:
    s = rows.iloc[0]["settings"]
    ratios = s.get("fast_over_jit") or {}
    if not ratios:
        return "no batch recorded"
    batches = sorted(int(b) for b in ratios)
    ax.plot(batches, [ratios[str(b)] for b in batches], marker="o", label="fast / jit decode tok/s")
    ax.axhline(1.0, color="#888", linestyle="--")
    ax.set(xscale="log", xlabel="batch size", ylabel="fast over jit")
    ax.set_xticks(batches, [str(b) for b in batches])
    ax.legend()
    return None


def _pareto(ax, rows: pd.DataFrame) -> str | None:
    points = pd.DataFrame(rows.iloc[0]["settings"].get("points") or [])
    if points.empty:
        return "no points recorded"
    for method, group in points.groupby("method"):
        group = group.sort_values("batch")
        ax.plot(group["tpot_ms"], group["tok_s"], marker="o", label=method)
        for _, p in group.iterrows():
            ax.annotate(f"b{p['batch']}", (p["tpot_ms"], p["tok_s"]), fontsize=8)
    ax.set(xlabel="per-request TPOT ms (p50)", ylabel="total decode tokens/s")
    ax.legend()
    return None


def _intervals(ax, rows: pd.DataFrame) -> str | None:
    rows = rows[np.isfinite(rows["estimate"].astype(float))]
    if rows.empty:
        return "no figure measured"
    y = np.arange(len(rows))
    low = (rows["estimate"] - rows["low"]).fillna(0).clip(lower=0)
    high = (rows["high"] - rows["estimate"]).fillna(0).clip(lower=0)
    ax.errorbar(rows["estimate"], y, xerr=[low, high], fmt="o")
    import textwrap

    ax.set_yticks(y, [textwrap.fill(m, 40) for m in rows["measured"]])
    ax.set(xlabel="figure (95% interval)")
    return None


DRAW = {"fan-out": _fan_out, "saguaro": _saguaro, "backups": _backups, "pareto": _pareto}


def study_plots(findings: pd.DataFrame, out_dir: Path) -> list[Plot]:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    plots = []
    for study, rows in findings.groupby("study", sort=False):
        title = f"{study}: {rows.iloc[0]['claim']}"
        fig = Figure(figsize=(9, 4.5), layout="constrained")
        FigureCanvasAgg(fig)
        reason = DRAW.get(study, _intervals)(fig.add_subplot(), rows)
        if reason:
            plots.append(Plot(f"study_{study}", title, None, reason))
            continue
        fig.suptitle(title[:110])
        path = Path(out_dir) / f"study_{study}.png"
        fig.savefig(path, dpi=110)
        plots.append(Plot(f"study_{study}", title, path))
    return plots


def findings_html(findings: pd.DataFrame) -> str:
    head = "".join(f"<th>{h}</th>" for h in ("study", "claim", "paper", "measured", "figure", "95% interval",
                                             "verdict", "why"))
    rows = []
    for _, f in findings.iterrows():
        interval = f"{f['low']:.3g} – {f['high']:.3g}" if math.isfinite(f["low"]) else "–"
        figure = f"{f['estimate']:.3g}" if math.isfinite(f["estimate"]) else "–"
        cells = [html.escape(str(c)) for c in (f["study"], f["claim"], f["paper"] or "–", f["measured"], figure,
                                               interval)]
        verdict = f'<b style="color:{COLOURS.get(f["verdict"], "#222")}">{html.escape(f["verdict"])}</b>'
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + f"<td>{verdict}</td>"
                    f"<td>{html.escape(f['reason'])}</td></tr>")
    return f"<table><tr>{head}</tr>{''.join(rows)}</table>"


def write_findings_report(folder: Path, out_dir: Path) -> tuple[Path, list[Plot]]:
    """report.html in `out_dir`: the findings table, then each study's figure."""
    findings = read_findings(folder)
    plots = study_plots(findings, out_dir)
    title = f"ssdbench reproduce · {Path(folder).name}"
    page = (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
            f"<style>{_CSS}td{{text-align:left}}</style></head><body><h1>{html.escape(title)}</h1>"
            f"<h2>Findings</h2>{findings_html(findings)}<h2>Figures</h2>"
            f"{''.join(figure_html(p) for p in plots)}</body></html>\n")
    path = Path(out_dir) / PAGE_NAME
    path.write_text(page, encoding="utf-8")
    return path, plots
