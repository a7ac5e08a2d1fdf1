"""`--int8-kernel`: the int8 draft's kernel pinned from the command line, recorded, and refused in one line
(exit 2) where this CPU or build cannot run it; through the real CLI in subprocesses."""

import json
import os
import subprocess
import sys

import pytest

from cli_fixtures import save_tiny_model
from test_int8_kernels import cc_without
from ssdbench.kernels.gemv import gemv_i8_unavailable_reason, vnni_i8_unavailable_reason

CLI = [sys.executable, "-c", "from ssdbench.cli.main import main; main()"]
pytestmark = pytest.mark.skipif(gemv_i8_unavailable_reason("cpu") is not None, reason="no kernel library here")


def ssdbench(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=600, env={**os.environ, **(env or {})})


def run_args(target, out, *extra: str) -> list[str]:
    return ["run", "--target", str(target), "--suite", "smoke", "--num-prompts", "2", "--max-new-tokens", "5",
            "--no-chat-template", "--methods", "ar,sd", "--out", str(out), *extra]


@pytest.mark.skipif(vnni_i8_unavailable_reason("cpu") is not None, reason="int8_vnni cannot run here")
def test_a_pinned_int8_kernel_runs_the_draft_and_is_recorded(tmp_path):
    target = save_tiny_model(tmp_path / "tiny", vocab=64, seed=0)
    done = ssdbench(*run_args(target, tmp_path / "run", "--int8-kernel", "int8_vnni"))
    assert done.returncode == 0, done.stderr
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["config"]["int8_kernel"] == "int8_vnni"
    assert manifest["kernels"]["draft"]["linear"] == "int8_vnni"


def test_a_kernel_this_build_cannot_run_is_refused_in_one_line(tmp_path):
    """A build without AMX or AVX2 (a compiler told so): int8_tiles and int8_vnni are refused, with why."""
    target = save_tiny_model(tmp_path / "tiny", vocab=64, seed=0)
    env = {"CC": cc_without(tmp_path, "-mno-avx512f", "-mno-avx2", "-mno-amx-tile", "-mno-amx-int8"),
           "XDG_CACHE_HOME": str(tmp_path / "cache")}
    for kernel, why in (("int8_tiles", "needs AMX tiles"), ("int8_vnni", "needs AVX2")):
        done = ssdbench(*run_args(target, tmp_path / kernel, "--int8-kernel", kernel), env=env)
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2 and len(lines) == 1, done.stderr
        assert f"int8 kernel '{kernel}' cannot run here: {why}" in lines[0]
        assert "Traceback" not in done.stderr


def test_an_unknown_int8_kernel_is_a_usage_error(tmp_path):
    target = save_tiny_model(tmp_path / "tiny", vocab=64, seed=0)
    done = ssdbench(*run_args(target, tmp_path / "run", "--int8-kernel", "int8_fast"))
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and "--int8-kernel" in lines[0] and "int8_fast" in lines[0]
