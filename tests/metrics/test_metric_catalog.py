"""A figure declared once in metrics/catalog.py is summarised into the run's report, shown by the run table
and the Markdown table, carried by the JSON and checked by the gate, with nothing else touched. The tests
declare one of each kind for their duration: a per-request figure (the decode time, a column of
requests.parquet) and a pooled one (the share of rounds that accepted every draft, from a new per-round
count)."""

from __future__ import annotations

import pandas as pd
import pytest
from rich.console import Console

from ssdbench.errors import UsageError
from ssdbench.metrics import catalog
from ssdbench.metrics.catalog import POOLED, TIMED, Figure
from ssdbench.records.reader import load_run
from ssdbench.report import run_views
from ssdbench.report.gate import FAIL, PASS, evaluate, parse_fail_on
from ssdbench.report.run_report import report_of_run
from synthetic_runs import Variant, speeds, write_run

DECODE_MS = Figure("decode_ms", "decode ms p50", fmt="{:.1f}", per_request=True, gate=TIMED, is_higher_better=False)
ALL_ACCEPTED = Figure("all_accepted_rate", "all accepted", fmt="{:.1%}", gate=POOLED, num="all_accepted",
                      den="rounds")


def _all_accepted(steps: pd.DataFrame) -> pd.Series:
    """1 where a round that proposed drafts accepted every one of them."""
    return ((steps["proposed"].fillna(0) > 0) & (steps["accepted"] == steps["proposed"])).astype(int)


def _write(path, accepted) -> object:
    return load_run(write_run(path, [Variant("ar", speeds(8, seed=1)),
                                     Variant("sd", speeds(8, factor=1.5, seed=2), accepted=accepted)], num_prompts=8))


@pytest.fixture
def run(tmp_path):
    return _write(tmp_path / "run", (4, 4, 2))


def _shown(run) -> tuple[dict, str, str]:
    """The report's JSON summary of the first variant that drafted, its Markdown and its table."""
    report = report_of_run(run)
    console = Console(record=True, width=400)
    run_views.print_table(report, console)
    sd = next(r for r in run_views.payload(report)["summary"] if r["label"] == "sd")
    return sd, run_views.markdown(report), console.export_text()


def test_a_declared_per_request_figure_reaches_the_report_its_views_and_the_gate(run, monkeypatch):
    record, markdown, table = _shown(run)
    assert "decode_ms_median" not in record and "decode ms p50" not in markdown + table
    with pytest.raises(UsageError, match="unknown metric 'decode_ms'"):
        parse_fail_on("decode_ms:+5%")

    monkeypatch.setattr(catalog, "FIGURES", catalog.FIGURES + (DECODE_MS,))
    record, markdown, table = _shown(run)
    expected = float(run.requests[run.requests.method == "sd"]["decode_ms"].median())
    assert record["decode_ms_median"] == pytest.approx(expected)
    assert "decode ms p50" in markdown and f"{expected:.1f}" in markdown and "decode ms p50" in table
    report = report_of_run(run)
    verdicts = evaluate(report, report, parse_fail_on("decode_ms:+5%"))
    assert {v.variant for v in verdicts} == {"ar", "sd"} and all(v.status == PASS for v in verdicts)


def test_a_declared_pooled_figure_with_a_new_round_count_reaches_them_too(run, tmp_path, monkeypatch):
    monkeypatch.setattr(catalog, "FIGURES", catalog.FIGURES + (ALL_ACCEPTED,))
    monkeypatch.setitem(catalog.ROUND_COUNTS, "all_accepted", _all_accepted)
    record, markdown, table = _shown(run)
    sd_steps = run.steps[run.steps.method == "sd"]
    expected = float((sd_steps["accepted"] == 4).mean())  # planted: 2 of every 3 rounds accept all 4 drafts
    assert record["all_accepted_rate"] == pytest.approx(expected) and 0 < expected < 1
    assert f"{expected:.1%}" in markdown and "all accepted" in table

    fewer = _write(tmp_path / "fewer", (4, 2, 2))  # 1 round in 3 accepts every draft: a drop the gate sees
    base, cand = report_of_run(run), report_of_run(fewer)
    assert [v.status for v in evaluate(base, base, parse_fail_on("all_accepted_rate:exact"))] == [PASS]
    verdicts = evaluate(base, cand, parse_fail_on("all_accepted_rate:-10%"))
    assert [(v.variant, v.status) for v in verdicts] == [("sd", FAIL)]
