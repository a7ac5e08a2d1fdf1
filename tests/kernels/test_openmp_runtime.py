"""Our C kernels never run a second OpenMP runtime beside torch's: where the build would bring one
(clang's libomp, torch built on Intel's libiomp5), the run detects it, falls back to the serial build
and records it. The second runtime here is a stand-in library named like clang's, linked in by a
compiler wrapper, in a fresh process (the library is loaded once per process)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from cli_fixtures import save_tiny_model

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None or not Path("/proc/self/maps").is_file(),
                                reason="needs gcc and Linux's /proc/self/maps")

ENTRY = "from ssdbench.cli.main import main; main()"


def compiler_linking_a_second_runtime(folder: Path) -> Path:
    """A `cc` that links `libomp.so` (a stand-in for clang's runtime) into every OpenMP build."""
    (folder / "omp.c").write_text("int stand_in_openmp_runtime(void) { return 1; }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", str(folder / "omp.c"), "-o", str(folder / "libomp.so")], check=True)
    wrapper = folder / "cc"
    wrapper.write_text(f"""#!/bin/sh
case " $* " in
  *" -fopenmp "*) exec gcc "$@" -L{folder} -Wl,-rpath,{folder} -Wl,--no-as-needed -lomp ;;
  *) exec gcc "$@" ;;
esac
""")
    wrapper.chmod(0o755)
    return wrapper


def run_on_gemv(target: Path, out: Path, cache: Path, **env: str) -> dict:
    args = [sys.executable, "-c", ENTRY, "run", "--target", str(target), "--suite", "smoke", "--num-prompts", "2",
            "--max-new-tokens", "4", "--no-chat-template", "--methods", "ar,sd", "--draft", "self-int8",
            "--linear-kernel", "gemv", "--threads", "2", "--out", str(out)]
    done = subprocess.run(args, env={**os.environ, "XDG_CACHE_HOME": str(cache), **env}, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return json.loads((out / "manifest.json").read_text())


def test_a_second_openmp_runtime_is_detected_recorded_and_avoided(tmp_path):
    target = save_tiny_model(tmp_path / "tiny")
    wrapper = compiler_linking_a_second_runtime(tmp_path)

    shared = run_on_gemv(target, tmp_path / "shared", tmp_path / "cache")
    assert "openmp_fallback" not in shared["kernels"]["target"], shared["kernels"]

    serial = run_on_gemv(target, tmp_path / "serial", tmp_path / "cache", CC=str(wrapper))
    why = serial["kernels"]["target"].get("openmp_fallback", "")
    assert str(tmp_path / "libomp.so") in why and "serial" in why, serial["kernels"]
    assert serial["kernels"]["target"]["linear"] == "gemv"
    requests = {name: pq.read_table(tmp_path / name / "requests.parquet").to_pydict() for name in ("shared", "serial")}
    assert requests["serial"]["output_token_ids"] == requests["shared"]["output_token_ids"]
