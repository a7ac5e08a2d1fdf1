"""A figure declared once in metrics/catalog.py is summarised, shown by the run table and the Markdown
table, carried by the JSON and checked by the gate, with nothing else touched: the test declares one (the
per-request decode time, a column of requests.parquet) for its duration."""

from __future__ import annotations

import pytest

from ssdbench.errors import UsageError
from ssdbench.metrics import catalog
from ssdbench.metrics.catalog import TIMED, Figure
from ssdbench.metrics.summary import summarize
from ssdbench.records.reader import load_run
from ssdbench.report.gate import PASS, evaluate, parse_fail_on
from ssdbench.report.render import summary_cells
from synthetic_runs import Variant, speeds, write_run

DECODE_MS = Figure("decode_ms", "decode ms p50", fmt="{:.1f}", per_request=True, gate=TIMED, is_higher_better=False)


@pytest.fixture
def run(tmp_path):
    return load_run(write_run(tmp_path / "run", [Variant("ar", speeds(8, seed=1)),
                                                 Variant("sd", speeds(8, factor=1.5, seed=2), accepted=(3,))],
                              num_prompts=8))


def _shown(run) -> tuple[list[str], dict, list[str]]:
    summary = summarize(run.requests, run.steps)
    headers, rows = summary_cells(summary)
    return headers, summary.to_dict(orient="records")[0], rows[0]


def test_a_declared_figure_reaches_the_tables_the_json_and_the_gate(run, monkeypatch):
    headers, record, _ = _shown(run)
    assert "decode ms p50" not in headers and "decode_ms_median" not in record
    with pytest.raises(UsageError, match="unknown metric 'decode_ms'"):
        parse_fail_on("decode_ms:+5%")

    monkeypatch.setattr(catalog, "FIGURES", catalog.FIGURES + (DECODE_MS,))
    headers, record, cells = _shown(run)
    expected = float(run.requests[run.requests.method == "ar"]["decode_ms"].median())
    assert record["decode_ms_median"] == pytest.approx(expected)  # the JSON is the summary's records
    assert cells[headers.index("decode ms p50")] == f"{expected:.1f}"
    verdicts = evaluate(run, run, parse_fail_on("decode_ms:+5%"))
    assert {v.variant for v in verdicts} == {"ar", "sd"} and all(v.status == PASS for v in verdicts)
