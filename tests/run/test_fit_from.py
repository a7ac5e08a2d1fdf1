"""`--fan-out geometric --fit-from RUN`: the fit is made first, from the earlier run's rounds, and the plan
is built from it without reading any run (run/fit.py, run/plan.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli_checks import assert_one_line_error
from cli_fixtures import save_tiny_model
from ssdbench.cli.main import app
from ssdbench.projection.theory import geometric_fan_out
from ssdbench.run.fit import AcceptanceFit, fit_run
from ssdbench.run.plan import build_plan
from ssdbench.run.settings import RunSettings

runner = CliRunner()


@pytest.fixture(scope="module")
def earlier(tmp_path_factory) -> tuple[Path, Path]:
    """A tiny target and an ssd run on it at two fan-outs' worth of rounds (fan-out 2) to fit from."""
    root = tmp_path_factory.mktemp("fit-from")
    target = save_tiny_model(root / "target")
    out = root / "earlier"
    result = runner.invoke(app, ["run", "--target", str(target), "--suite", "smoke", "--num-prompts", "3",
                                 "--max-new-tokens", "12", "--no-chat-template", "--k", "3", "--methods", "ar,ssd",
                                 "--fan-out", "2", "--temperature", "1", "--out", str(out)])
    assert result.exit_code == 0, result.output
    return target, out


def test_geometric_fan_out_is_fitted_on_the_earlier_run(earlier, tmp_path):
    target, fitted_on = earlier
    out = tmp_path / "geo"
    result = runner.invoke(app, ["run", "--target", str(target), "--suite", "smoke", "--num-prompts", "2",
                                 "--max-new-tokens", "8", "--no-chat-template", "--k", "3", "--methods", "ar,ssd",
                                 "--fan-out", "geometric", "--fit-from", str(fitted_on), "--out", str(out)])
    assert result.exit_code == 0, result.output
    fit = fit_run(fitted_on)
    assert 0 < fit.a <= 1
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["ssd"]["after_hit"] == list(geometric_fan_out(3 * 4, fit.a, fit.r, 3))


def test_the_plan_reads_no_run_it_plans_with_the_fit_it_is_given(tmp_path):
    settings = RunSettings(methods=("ssd",), fan_out="geometric", fit_from=tmp_path / "not-there", k=3)
    plan = build_plan(settings, fit=AcceptanceFit(a=0.8, r=0.5, source=tmp_path / "not-there"))
    assert plan.ssd.fan_out.after_hit == tuple(geometric_fan_out(12, 0.8, 0.5, 3))
    with pytest.raises(ValueError, match="fit .* before planning"):
        build_plan(settings)


def test_geometric_without_fit_from_is_one_line(earlier, tmp_path):
    target, _ = earlier
    result = runner.invoke(app, ["run", "--target", str(target), "--suite", "smoke", "--methods", "ssd",
                                 "--fan-out", "geometric", "--out", str(tmp_path / "x")])
    assert_one_line_error(result, "--fan-out geometric needs --fit-from RUN")
