"""`--target-device` / `--draft-device` through the real CLI: what cannot be honoured is refused in one line."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from cli_checks import assert_one_line_error
from typer.testing import CliRunner

from ssdbench.cli.main import app

runner = CliRunner()
CORES = sorted(os.sched_getaffinity(0))


def run(tiny: Path, out: Path, *extra: str):
    return runner.invoke(app, ["run", "--target", str(tiny), "--suite", "smoke", "--num-prompts", "1",
                               "--max-new-tokens", "4", "--no-chat-template", "--k", "2", "--fan-out", "1",
                               "--out", str(out), *extra])


@pytest.mark.parametrize("target, draft", [
    (f"cpu:{CORES[0]}", f"cpu:{CORES[0]}"),
    (f"cpu:{CORES[0]}-{CORES[-1]}", f"cpu:{CORES[-1]}"),
    (f"cpu:{CORES[-1]},{CORES[0]}", f"cpu:{CORES[0]}"),
])
def test_ssd_roles_sharing_cores_are_refused(tiny, tmp_path, target, draft):
    result = run(tiny, tmp_path / "run", "--methods", "ar,ssd", "--target-device", target, "--draft-device", draft)
    assert_one_line_error(result, "share core", target, draft)
    assert not (tmp_path / "run").exists()


@pytest.mark.skipif(len(CORES) < 2, reason="the default split needs two cores")
def test_a_target_on_the_default_draft_cores_says_the_draft_was_the_default(tiny, tmp_path):
    result = run(tiny, tmp_path / "run", "--methods", "ar,ssd", "--target-device", f"cpu:{CORES[-1]}")
    assert_one_line_error(result, "share core", f"--draft-device cpu:{CORES[-1]} (the default)")


@pytest.mark.parametrize("flag", ["--target-device", "--draft-device"])
@pytest.mark.parametrize("value, fragment", [
    ("cpu:", "names no cores"),
    ("cpu: ", "names no cores"),
    ("cpu:3-1", "reversed core range"),
    ("cpu:0-100000000", "not available here"),
    ("cpu:0,,1", "bad core list"),
    ("cpu:x", "bad core list"),
    ("gpu:0", "expected cpu"),
])
def test_malformed_core_lists_are_refused(tiny, tmp_path, flag, value, fragment):
    assert_one_line_error(run(tiny, tmp_path / "run", "--methods", "ar", flag, value), flag, fragment)
    assert not (tmp_path / "run").exists()


def test_a_core_the_machine_lacks_is_named_once(tiny, tmp_path):
    past = CORES[-1] + 1  # never in this process's affinity
    line = assert_one_line_error(run(tiny, tmp_path / "run", "--methods", "ar", "--target-device", f"cpu:{past}"),
                                 f"--target-device cpu:{past}: core {past} is not available here")
    assert "[" not in line
    assert_one_line_error(run(tiny, tmp_path / "run", "--methods", "ar", "--target-device", f"cpu:{past}-{past + 3}"),
                          f"cores {past},{past + 3} are not available here")


@pytest.mark.parametrize("extra, fragment", [
    (("--methods", "ar,sd", "--sd-draft-device", "cpu"), "on CPU it shares the target's cores"),
    (("--methods", "ar,ssd", "--sd-draft-device", "cuda:1"), "no method of this run drafts in the target's process"),
    (("--methods", "ar,sd", "--draft", "ngram", "--sd-draft-device", "cuda:1"), "no weights of its own"),
    (("--methods", "ar,sd", "--draft", "self-skip:1", "--sd-draft-device", "cuda:1"), "no weights of its own"),
    (("--methods", "ar,sd", "--engine", "native,hf", "--sd-draft-device", "cuda:1"), "use --engine native"),
])
def test_what_sd_draft_device_cannot_do_is_one_line(tiny, tmp_path, extra, fragment):
    assert_one_line_error(run(tiny, tmp_path / "run", *extra), "--sd-draft-device", fragment)
    assert not (tmp_path / "run").exists()


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="checks the refusal where CUDA is missing")
def test_sd_draft_device_on_a_machine_without_cuda_is_one_line(tiny, tmp_path):
    assert_one_line_error(run(tiny, tmp_path / "run", "--methods", "ar,sd", "--sd-draft-device", "cuda:1"),
                          "--sd-draft-device", "CUDA is not available")


@pytest.mark.skipif(len(CORES) < 2, reason="needs two cores to pin the roles apart")
def test_disjoint_cores_run_and_are_recorded(tiny, tmp_path):
    result = run(tiny, tmp_path / "run", "--methods", "ar,ssd", "--target-device", f"cpu:{CORES[0]}",
                 "--draft-device", f"cpu:{CORES[1]}")
    assert result.exit_code == 0, result.output
    models = json.loads((tmp_path / "run" / "manifest.json").read_text())["models"]
    assert models["target"]["placement"]["cores"] == [CORES[0]]
    assert models["draft"]["ssd"]["placement"]["cores"] == [CORES[1]]


@pytest.mark.gpu
@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("temperature", ["0", "0.8"])
def test_sd_with_its_draft_on_another_device_decodes_exactly(tiny, tmp_path, temperature):
    """A CPU target with sd's draft on the GPU: the cross-device path one GPU can check (tokens, q and
    the draft's own generator on the draft's device). Greedy sd must equal ar."""
    import pyarrow.parquet as pq

    out = tmp_path / "run"
    result = run(tiny, out, "--methods", "ar,sd", "--device", "cpu", "--sd-draft-device", "cuda:0",
                 "--temperature", temperature)
    assert result.exit_code == 0, result.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert "cuda:0 (--sd-draft-device)" in manifest["models"]["draft"]["sd"]
    requests = pq.read_table(out / "requests.parquet").to_pandas().sort_values("request_idx")
    by_method = {m: [list(o) for o in g["output_token_ids"]] for m, g in requests.groupby("method")}
    assert all(len(o) == 4 for o in by_method["sd"])
    if temperature == "0":
        assert by_method["sd"] == by_method["ar"]
