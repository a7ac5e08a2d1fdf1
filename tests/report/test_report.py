"""`ssdbench report`: PNGs and one HTML page from real tiny runs and a synthetic SSD run; bad input."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from cli_checks import assert_one_line_error
from cli_fixtures import save_tiny_model
from tests.projection.test_projection import request, step, write_run
from typer.testing import CliRunner

from ssdbench.cli.main import app
from ssdbench.records.reader import load_run
from ssdbench.report.plots import frontier_points, pareto_mask, stack_runs

runner = CliRunner()
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def tiny_runs(tmp_path_factory) -> list[Path]:
    """Two real runs of ar and sd on a tiny model: batch 1 and batch 2."""
    folder = tmp_path_factory.mktemp("report")
    target = save_tiny_model(folder / "tiny", vocab=64, seed=0)
    runs = []
    for batch in (1, 2):
        out = folder / f"run-b{batch}"
        result = runner.invoke(app, ["run", "--target", str(target), "--suite", "smoke", "--num-prompts", "3",
                                     "--max-new-tokens", "6", "--no-chat-template", "--methods", "ar,sd", "--k", "3",
                                     "--batch-size", str(batch), "--out", str(out)])
        assert result.exit_code == 0, result.output
        runs.append(out)
    return runs


def _pngs(folder: Path) -> dict[str, bytes]:
    return {p.stem: p.read_bytes() for p in folder.glob("*.png")}


def test_report_on_one_real_run(tiny_runs):
    run = tiny_runs[0]
    result = runner.invoke(app, ["report", str(run)])
    assert result.exit_code == 0, result.output
    out = run / "report"  # the default folder
    pngs = _pngs(out)
    assert {"acceptance_length", "per_position_acceptance", "decode_throughput"} <= set(pngs)
    assert all(data.startswith(PNG_MAGIC) and len(data) > 1000 for data in pngs.values())
    page = (out / "report.html").read_text()
    for name in pngs:
        assert f'href="{name}.png"' in page
    assert page.count("data:image/png;base64,") == len(pngs)
    assert "decode tok/s p50" in page and "<td>sd</td>" in page and "Greedy outputs identical to ar" in page
    # no GPU samples, no SSD rounds, one run: those figures are skipped, and the page says why
    assert "Skipped <b>GPU utilisation and power</b>" in page and "Skipped <b>SSD hit rate vs fan-out</b>" in page
    assert "Skipped <b>Throughput–latency frontier</b>" in page
    assert not (out / "gpu_telemetry.png").exists()


def test_report_on_several_runs_draws_the_frontier(tiny_runs, tmp_path):
    out = tmp_path / "both"
    result = runner.invoke(app, ["report", *map(str, tiny_runs), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "throughput_latency" in _pngs(out)
    page = (out / "report.html").read_text()
    assert "run-b1" in page and "run-b2" in page and "Skipped <b>Throughput–latency" not in page
    points = frontier_points(stack_runs([load_run(p) for p in tiny_runs]))
    assert sorted(points["batch_size"].unique()) == [1, 2] and (points["total_tokens_per_s"] > 0).all()


def test_pareto_mask():
    latency = [1.0, 2.0, 3.0, 2.5, 1.0]
    throughput = [10.0, 30.0, 25.0, 20.0, 5.0]
    assert pareto_mask(latency, throughput) == [True, True, False, False, False]


def test_report_with_ssd_rounds_and_gpu_samples(tmp_path):
    steps, requests = [], []
    for p in range(3):
        steps += [step("ar", p, 0) for _ in range(4)]
        for fan_out, hits in ((4, [True, False, False, False]), (8, [True, True, False, False]),
                              (16, [True, True, True, False])):
            steps += [step("ssd", p, 2 if h else 0, proposed=3, step_ms=12.0, cache_hit=h, fan_out=fan_out,
                           backup=None if h else "jit") for h in hits]
        requests += [request("ar", p, 100.0), request("ssd", p, 150.0)]
    gpu = [{"t_ns": 1_700_000_000_000_000_000 + i * 10**8, "device_index": d, "role": role, "util_pct": 50.0 + i,
            "mem_mib": 1000.0, "power_w": 200.0 + i, "energy_mj": None, "sm_clock_mhz": 1500.0}
           for i in range(10) for d, role in ((0, "target"), (1, "draft"))]
    run = write_run(tmp_path / "ssd", steps, requests, gpu, k=3)
    result = runner.invoke(app, ["report", str(run), "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    pngs = _pngs(tmp_path / "out")
    assert {"ssd_hit_rate", "gpu_telemetry", "acceptance_length"} <= set(pngs)
    assert all(data.startswith(PNG_MAGIC) for data in pngs.values())


def test_report_bad_input(tiny_runs, tmp_path):
    assert_one_line_error(runner.invoke(app, ["report", str(tmp_path / "missing")]), "does not exist")
    assert_one_line_error(runner.invoke(app, ["report", str(tmp_path)]), "not an ssdbench run")
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    assert_one_line_error(runner.invoke(app, ["report", str(tiny_runs[0]), "--out", str(blocker / "report")]), "a-file")
    assert_one_line_error(runner.invoke(app, ["report", str(tiny_runs[0]), "--out", str(blocker)]), "not a folder")
    broken = tmp_path / "broken"
    broken.mkdir()
    for item in tiny_runs[0].iterdir():
        if item.is_file():
            (broken / item.name).write_bytes(item.read_bytes())
    (broken / "requests.parquet").write_bytes(b"garbage")
    assert_one_line_error(runner.invoke(app, ["report", str(broken)]), "requests.parquet", "corrupt")
    assert not (broken / "report").exists()


def test_importing_report_and_projection_is_light():
    code = ("import sys, ssdbench.report.plots, ssdbench.report.html, ssdbench.cli.report, ssdbench.cli.project, "
            "ssdbench.projection.roofline, ssdbench.projection.theory, ssdbench.projection.hardware; "
            "print(sorted(m for m in ('matplotlib', 'pandas', 'torch') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout
