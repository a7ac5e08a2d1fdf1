"""`sweep --shard I/N` runs one slice of the grid; `merge` joins the slices into the sweep an unsharded run makes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli_checks import assert_one_line_error
from cli_fixtures import save_tiny_model
from ssdbench.cli.main import app
from ssdbench.records.reader import load_run

runner = CliRunner()


@pytest.fixture(scope="module")
def tiny_target(tmp_path_factory) -> Path:
    return save_tiny_model(tmp_path_factory.mktemp("models") / "tiny", vocab=64, seed=0)


def sweep(target: Path, out: Path, *extra: str, k: str = "2,3"):
    """Four points (batch 1 and 2 × K), greedy, so every run of a point decodes the same tokens."""
    return runner.invoke(app, ["sweep", "--target", str(target), "--suite", "smoke", "--num-prompts", "2",
                               "--max-new-tokens", "5", "--no-chat-template", "--batch-sizes", "1,2", "--k", k,
                               "--methods", "ar,sd", "--out", str(out), *extra])


@pytest.fixture(scope="module")
def shards(tiny_target, tmp_path_factory) -> list[Path]:
    root = tmp_path_factory.mktemp("shards")
    folders = [root / f"shard{i}" for i in (1, 2, 3)]
    for i, folder in enumerate(folders, start=1):
        result = sweep(tiny_target, folder, "--shard", f"{i}/3")
        assert result.exit_code == 0, result.output
    return folders


def index(folder: Path) -> dict:
    return json.loads((folder / "index.json").read_text())


def without_out(config: dict) -> dict:
    """A run's settings but its folder (which names the sweep folder it was run in)."""
    return {k: v for k, v in config.items() if k != "out"}


def test_three_shards_merged_are_the_unsharded_sweep(tiny_target, shards, tmp_path):
    assert [[p["name"] for p in index(f)["points"]] for f in shards] == [
        ["b1-t0-k2", "b2-t0-k3"], ["b1-t0-k3"], ["b2-t0-k2"]]  # every third point, from the shard's own
    whole = tmp_path / "whole"
    assert sweep(tiny_target, whole).exit_code == 0
    merged = tmp_path / "merged"
    result = runner.invoke(app, ["merge", *map(str, reversed(shards)), "--out", str(merged)])
    assert result.exit_code == 0, result.output
    assert index(merged) == index(whole)
    assert sorted(p.name for p in merged.iterdir()) == sorted(p.name for p in whole.iterdir())
    for point in index(whole)["points"]:
        ours, theirs = load_run(merged / point["run_dir"]), load_run(whole / point["run_dir"])  # hashes still hold
        assert without_out(ours.manifest["config"]) == without_out(theirs.manifest["config"])
        assert ours.requests["output_token_ids"].map(list).tolist() == \
            theirs.requests["output_token_ids"].map(list).tolist()
        assert len(ours.steps) == len(theirs.steps)


def test_merge_refuses_a_missing_or_repeated_shard(shards, tmp_path):
    out = tmp_path / "merged"
    assert_one_line_error(runner.invoke(app, ["merge", str(shards[0]), str(shards[1]), "--out", str(out)]),
                          "shard(s) 3/3 missing")
    assert_one_line_error(runner.invoke(app, ["merge", str(shards[0]), str(shards[0]), str(shards[1]),
                                              "--out", str(out)]), "are both shard 1/3")
    assert not out.exists()


def test_merge_refuses_shards_of_another_grid(tiny_target, shards, tmp_path):
    other = tmp_path / "other3"
    assert sweep(tiny_target, other, "--shard", "3/3", k="2,4").exit_code == 0
    result = runner.invoke(app, ["merge", str(shards[0]), str(shards[1]), str(other), "--out", str(tmp_path / "m")])
    assert_one_line_error(result, "shards of sweeps with different grid")


def test_merge_refuses_shards_run_by_other_code(shards, tmp_path):
    copy = tmp_path / "shard3"
    shutil.copytree(shards[2], copy)
    recorded = index(copy)
    recorded["shard"]["code"]["git"] = {"commit": "0123456789abcdef", "dirty": False}  # as another checkout records
    (copy / "index.json").write_text(json.dumps(recorded))
    result = runner.invoke(app, ["merge", str(shards[0]), str(shards[1]), str(copy), "--out", str(tmp_path / "m")])
    assert_one_line_error(result, "shards of sweeps with different code", "0123456789")


def test_merge_refuses_a_whole_sweep_and_a_shard_not_complete(tiny_target, shards, tmp_path):
    broken = tmp_path / "shard2"
    shutil.copytree(shards[1], broken)
    manifest = json.loads((broken / "b1-t0-k3" / "manifest.json").read_text())
    (broken / "b1-t0-k3" / "manifest.json").write_text(json.dumps({**manifest, "status": "interrupted"}))
    result = runner.invoke(app, ["merge", str(shards[0]), str(broken), str(shards[2]), "--out", str(tmp_path / "m")])
    assert_one_line_error(result, "point b1-t0-k3", "not complete (interrupted)", "rerun that shard")
    whole = tmp_path / "whole"
    assert sweep(tiny_target, whole, k="2").exit_code == 0
    assert_one_line_error(runner.invoke(app, ["merge", str(whole), "--out", str(tmp_path / "m")]),
                          "is a whole sweep, not a shard")


@pytest.mark.parametrize("shard,fragment", [
    ("0/3", "--shard expects I/N with 1 <= I <= N"), ("4/3", "--shard expects I/N"), ("a/b", "got 'a/b'"),
    ("2", "got '2'"), ("5/5", "--shard 5/5: the grid has only 4 point(s)"),
])
def test_a_bad_shard_is_one_line(tiny_target, tmp_path, shard, fragment):
    out = tmp_path / "sw"
    assert_one_line_error(sweep(tiny_target, out, "--shard", shard), fragment)
    assert not out.exists()


def test_a_shard_folder_resumes_only_as_that_shard(tiny_target, shards):
    before = (shards[0] / "index.json").read_bytes()
    assert_one_line_error(sweep(tiny_target, shards[0], "--shard", "2/3"), "holds shard 1/3, not shard 2/3")
    assert_one_line_error(sweep(tiny_target, shards[0]), "holds shard 1/3, not the whole grid")
    assert (shards[0] / "index.json").read_bytes() == before
    result = sweep(tiny_target, shards[0], "--shard", "1/3")
    assert result.exit_code == 0 and "2 point(s) were already complete" in result.output
