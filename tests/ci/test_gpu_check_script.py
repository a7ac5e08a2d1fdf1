"""ci/gpu_check.sh in its CPU mode: set-up checks, step order, the files under OUT_DIR, the summary."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "ci" / "gpu_check.sh"
OUT_FILES = {"summary.md", "summary.json", "setup.log", "tests.log", "bench.log", "runs.tgz"}


def run_check(out: Path | None, **env: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "SSDBENCH_GPU_CHECK_DEVICE": "cpu", "SSDBENCH_GPU_CHECK_PYTHON": sys.executable,
           "SSDBENCH_GPU_CHECK_INSTALL": "no", **env}
    env.pop("OUT", None)
    args = ["bash", str(SCRIPT)] + ([str(out)] if out else [])
    return subprocess.run(args, env=env, capture_output=True, text=True, timeout=600)


def load_helper():
    spec = importlib.util.spec_from_file_location("gpu_check", REPO / "ci" / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_usage_errors_exit_2(tmp_path):
    assert run_check(None).returncode == 2
    bad = run_check(tmp_path / "out", SSDBENCH_GPU_CHECK_DEVICE="tpu")
    assert bad.returncode == 2 and "cuda or cpu" in bad.stderr


def test_requirements_read_without_tomllib_match_tomllib(monkeypatch):
    helper = load_helper()
    with_toml = helper.read_requirements(REPO / "pyproject.toml")
    monkeypatch.setitem(sys.modules, "tomllib", None)  # Python 3.10: no tomllib
    assert helper.read_requirements(REPO / "pyproject.toml") == with_toml
    assert "pytest>=8" in with_toml and helper.split_requirement("transformers>=5.0,<6") == ("transformers", ">=5.0,<6")


@pytest.mark.slow
def test_cpu_mode_writes_the_summary_logs_and_runs(tmp_path):
    out = tmp_path / "out"
    done = run_check(out, SSDBENCH_GPU_CHECK_STEPS="tests random",
                     SSDBENCH_GPU_CHECK_TESTS="tests/models/test_memory_plan.py",
                     SSDBENCH_GPU_CHECK_PROMPTS="1", SSDBENCH_GPU_CHECK_TOKENS="3")
    assert done.returncode == 0, done.stdout + done.stderr + (out / "summary.md").read_text()
    # What the device tool brings back: a few plainly named files, no folders.
    assert {p.name for p in out.iterdir()} == OUT_FILES
    assert all(re.fullmatch(r"[A-Za-z0-9._-]+", p.name) and p.is_file() for p in out.iterdir())
    summary = json.loads((out / "summary.json").read_text())
    steps = {s["name"]: s["status"] for s in summary["steps"]}
    assert steps == {"setup": "pass", "tests-gpu": "pass", "tests-device": "pass", "random": "pass",
                     "default": "not selected", "hf": "not selected"}
    assert summary["passed"] and summary["tests"]["device"]["passed"] > 0
    assert [row["label"] for row in summary["runs"]["random"]["summary"]] == ["ar", "sd", "ssd"]
    text = (out / "summary.md").read_text()
    assert text.startswith("# ssdbench GPU check: PASSED") and "| random | pass |" in text and "--random-weights" in text
    with tarfile.open(out / "runs.tgz") as tar:
        names = set(tar.getnames())
    assert {"runs/random/manifest.json", "runs/random.json", "runs/tests-gpu.xml"} <= names
    assert "missing: none" in (out / "setup.log").read_text()
