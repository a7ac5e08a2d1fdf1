"""`ssdbench sweep`: one run per grid point, models loaded once, resumable after an interruption."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli_checks import assert_one_line_error
from cli_fixtures import save_tiny_model
from ssdbench.cli.main import app
from ssdbench.cli import endpoint_options

runner = CliRunner()


@pytest.fixture(scope="module")
def tiny_target(tmp_path_factory) -> Path:
    return save_tiny_model(tmp_path_factory.mktemp("models") / "tiny", vocab=64, seed=0)


def sweep(target: Path, out: Path, *extra: str):
    return runner.invoke(app, ["sweep", "--target", str(target), "--suite", "smoke", "--num-prompts", "2",
                               "--max-new-tokens", "5", "--no-chat-template", "--batch-sizes", "1,2", "--k", "2,3",
                               "--methods", "ar,sd", "--out", str(out), *extra])


def test_sweep_runs_every_point_once_and_loads_models_once(tiny_target, tmp_path, monkeypatch):
    import ssdbench.models.model_set as model_set

    built = []
    original = model_set.build_model
    monkeypatch.setattr(model_set, "build_model",
                        lambda recipe, **k: built.append(recipe.weights) or original(recipe, **k))
    result = sweep(tiny_target, tmp_path / "sw")
    assert result.exit_code == 0, result.output
    index = json.loads((tmp_path / "sw" / "index.json").read_text())
    assert [p["status"] for p in index["points"]] == ["complete"] * 4
    assert {p["name"] for p in index["points"]} == {"b1-t0-k2", "b1-t0-k3", "b2-t0-k2", "b2-t0-k3"}
    assert sorted(built) == ["fp32", "int8"]  # target and its int8 draft, once each for the whole sweep
    assert "Pareto" in result.output and "★" in result.output


def test_sweep_resumes_after_an_interruption(tiny_target, tmp_path, monkeypatch):
    import ssdbench.run.session as session

    out = tmp_path / "sw"
    original = session.execute
    calls = []

    def interrupt_third(plan, *args, **kwargs):  # Ctrl-C in the middle of the third point
        calls.append(plan.out.name)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return original(plan, *args, **kwargs)

    monkeypatch.setattr(session, "execute", interrupt_third)
    assert sweep(tiny_target, out).exit_code != 0
    assert json.loads((out / calls[2] / "manifest.json").read_text())["status"] == "interrupted"
    statuses = {p["name"]: p["status"] for p in json.loads((out / "index.json").read_text())["points"]}
    assert statuses[calls[2]] == "interrupted" and "running" not in statuses.values()  # the index agrees
    done = {p: (out / p / "manifest.json").read_bytes() for p in calls[:2]}
    monkeypatch.setattr(session, "execute", original)
    result = sweep(tiny_target, out)
    assert result.exit_code == 0, result.output
    assert "2 point(s) were already complete" in result.output
    assert {p: (out / p / "manifest.json").read_bytes() for p in calls[:2]} == done  # kept, not re-run
    index = json.loads((out / "index.json").read_text())
    assert [p["status"] for p in index["points"]] == ["complete"] * 4
    assert (out / f"{calls[2]}.unfinished-1" / "manifest.json").is_file()  # the interrupted try, kept aside


def test_sweep_refuses_a_folder_that_is_not_a_sweep(tiny_target, tmp_path):
    out = tmp_path / "busy"
    out.mkdir()
    (out / "something").write_text("x")
    result = sweep(tiny_target, out)
    assert result.exit_code == 2 and "not a sweep" in result.output


def test_a_failed_point_is_marked_failed_in_the_index(tiny_target, tmp_path, monkeypatch):
    import ssdbench.run.session as session

    def crash(plan, *args, **kwargs):
        raise RuntimeError("simulated crash in decoding")

    monkeypatch.setattr(session, "execute", crash)
    out = tmp_path / "sw"
    assert sweep(tiny_target, out).exit_code == 1
    points = json.loads((out / "index.json").read_text())["points"]
    assert [p["status"] for p in points] == ["failed", "absent", "absent", "absent"]


def test_every_run_option_is_a_sweep_option(tiny_target):
    """One declaration (cli/options.py): whatever `run` takes, `sweep` takes too."""
    def flags(command: str) -> set[str]:
        help_text = runner.invoke(app, [command, "--help"], terminal_width=250).output
        return set(re.findall(r"--[a-z][a-z0-9-]*", help_text))

    # the serving-engine options are run's alone (cli/endpoint_options.py): a sweep has no servers to start or stop
    # (help may shorten a long flag: a prefix of one of them counts as it)
    run_only = ["--" + field.replace("_", "-") for field in endpoint_options.FIELDS]
    missing = {f for f in flags("run") - flags("sweep") if not any(r.startswith(f) for r in run_only)}
    assert missing == set()


def test_any_run_setting_can_be_an_axis(tiny_target, tmp_path):
    out = tmp_path / "sw"
    result = runner.invoke(app, ["sweep", "--target", str(tiny_target), "--suite", "smoke", "--num-prompts", "2",
                                 "--max-new-tokens", "4", "--no-chat-template", "--batch-size", "1",
                                 "--temperature", "0,0.5", "--grid", "top_p=0.9,1", "--methods", "ar,sd",
                                 "--out", str(out)])
    assert result.exit_code == 0, result.output
    points = json.loads((out / "index.json").read_text())["points"]
    assert sorted(p["name"] for p in points) == ["b1-t0-k4-top-p=0.9", "b1-t0-k4-top-p=1", "b1-t0.5-k4-top-p=0.9",
                                                 "b1-t0.5-k4-top-p=1"]
    for point in points:
        config = json.loads((out / point["run_dir"] / "manifest.json").read_text())["config"]
        assert (config["temperature"], config["top_p"]) == (point["temperature"], point["top_p"])


@pytest.mark.parametrize("extra,fragments", [
    (("--grid", "top_q=0.9"), ("top_q", "not a run setting", "top_p")),
    (("--grid", "dtype=float32;bfloat16"), ("loads its models", "once")),
    (("--k", "2,x"), ("--k", "int")),
    (("--grid", "k=2,3", "--k", "2,4"), ("--grid k", "already an axis")),
    (("--linear-kernel", "auto,matmul"), ("--linear-kernel cannot be an axis", "loads its models and prompts once")),
    (("--tp", "1,2"), ("--tp cannot be an axis",)),
    (("--grid", "linear_kernel=auto,matmul"), ("--linear-kernel cannot be an axis",)),
    (("--k", "2,,4"), ("--k: '2,,4' has an empty item",)),
    (("--batch-sizes", "1,"), ("--batch-size: '1,' has an empty item",)),
    (("--grid", "top_p=0.9,"), ("--grid top_p: '0.9,' has an empty item",)),
])
def test_bad_axes_are_refused_before_anything_runs(tiny_target, tmp_path, extra, fragments):
    out = tmp_path / "sw"
    result = runner.invoke(app, ["sweep", "--target", str(tiny_target), "--suite", "smoke", "--num-prompts", "1",
                                 "--no-chat-template", "--batch-size", "1", "--out", str(out), *extra])
    assert_one_line_error(result, *fragments)
    assert not out.exists()


def small_sweep(target: Path, out: Path, *extra: str):
    """Two points (K 2 and 4) of one request each, unless `extra` says otherwise."""
    return runner.invoke(app, ["sweep", "--target", str(target), "--suite", "smoke", "--num-prompts", "1",
                               "--no-chat-template", "--batch-sizes", "1", "--methods", "ar,sd", "--out", str(out),
                               *extra])


@pytest.mark.parametrize("first,again,fragments", [
    (("--max-new-tokens", "5", "--k", "2,4"), ("--max-new-tokens", "6", "--k", "2,4"),
     ("other settings", "max_new_tokens recorded 5, now 6")),
    (("--max-new-tokens", "5", "--k", "2,4"), ("--max-new-tokens", "5", "--k", "2,4", "--methods", "ar"),
     ("other settings", 'methods recorded ["ar", "sd"], now ["ar"]')),
    (("--max-new-tokens", "5", "--k", "2", "--grid", "top_p=0.9,1"), ("--max-new-tokens", "5", "--k", "2"),
     ("other axes", "recorded: batch_size, k, temperature, top_p; now: batch_size, k, temperature")),
])
def test_a_resume_with_other_settings_is_refused_and_nothing_rewritten(tiny_target, tmp_path, first, again, fragments):
    out = tmp_path / "sw"
    assert small_sweep(tiny_target, out, *first).exit_code == 0
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert_one_line_error(small_sweep(tiny_target, out, *again), *fragments)
    assert {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()} == before


def test_a_rerun_over_part_of_the_grid_keeps_the_other_points_indexed(tiny_target, tmp_path):
    out = tmp_path / "sw"
    assert small_sweep(tiny_target, out, "--max-new-tokens", "5", "--k", "2,4").exit_code == 0
    base = json.loads((out / "index.json").read_text())["base_config"]
    result = small_sweep(tiny_target, out, "--max-new-tokens", "5", "--k", "4,3")
    assert result.exit_code == 0, result.output
    index = json.loads((out / "index.json").read_text())
    assert index["base_config"] == base  # k=2 as first recorded, though this grid starts at 4
    assert {p["name"]: p["status"] for p in index["points"]} == {
        "b1-t0-k4": "complete", "b1-t0-k3": "complete", "b1-t0-k2": "complete"}


def help_line(command: str, flag: str) -> str:
    """The row of `flag` in the command's --help, wide enough that no row wraps."""
    text = runner.invoke(app, [command, "--help"], env={"COLUMNS": "400"}).output
    [line] = [line for line in text.splitlines() if re.search(rf"│ {flag}[\s,]", line)]
    return line


def test_sweep_help_marks_the_axes_in_their_value_column():
    for flag, kind in (("--k", "int"), ("--temperature", "float"), ("--top-p", "float"), ("--max-new-tokens", "int")):
        assert f"<{kind},...>" in help_line("sweep", flag)
    for flag in ("--linear-kernel", "--tp", "--dtype", "--target"):  # one value per sweep
        assert ",...>" not in help_line("sweep", flag)
    assert "<int,...>" in runner.invoke(app, ["sweep", "--help"], env={"COLUMNS": "400"}).output.split("│")[0]
    assert "any run setting" not in runner.invoke(app, ["--help"], env={"COLUMNS": "400"}).output
