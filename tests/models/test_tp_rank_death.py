"""A tensor-parallel rank that dies is noticed at once, and the run is marked failed naming the rank and
why; rank 0 does not wait for a collective's or the rendezvous's timeout (600 s). Real runs in
subprocesses, rank 1 killed with SIGKILL before it joins and while decoding."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_fixtures import save_tiny_model

ENTRY = "from ssdbench.cli.main import main; main()"
WAIT_S = 300  # waiting for a state, never a timing: a loaded machine is slow
NOTICED_WITHIN_S = 120  # far below the 600 s timeouts rank 0 used to wait out


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return save_tiny_model(tmp_path_factory.mktemp("models") / "tiny")


def start_tp_run(target: Path, out: Path) -> subprocess.Popen:
    args = [sys.executable, "-c", ENTRY, "run", "--target", str(target), "--suite", "smoke", "--num-prompts", "3",
            "--no-chat-template", "--max-new-tokens", "400", "--ignore-eos", "--repeats", "50", "--tp", "2",
            "--methods", "ar", "--threads", "2", "--out", str(out)]
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def rank_process(pid: int) -> int | None:
    """The spawned rank 1 among the run's children (not multiprocessing's resource tracker)."""
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return None
    for child in children:
        try:
            if b"spawn_main" in Path(f"/proc/{child}/cmdline").read_bytes():
                return int(child)
        except OSError:
            continue
    return None


def wait_for(condition, what: str):
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if value := condition():
            return value
        time.sleep(0.05)
    raise AssertionError(f"gave up waiting for {what}")


def decoding_started(out: Path) -> bool:
    """The ar variant's timed pass is under way: rank 1 has joined and built its shard."""
    try:
        return json.loads((out / "manifest.json").read_text()).get("status") == "running"
    except (OSError, ValueError):
        return False


@pytest.mark.parametrize("when", ["before joining", "while decoding"])
def test_a_killed_rank_fails_the_run_at_once_naming_the_rank(tiny, tmp_path, when):
    out = tmp_path / "run"
    run = start_tp_run(tiny, out)
    try:
        rank = wait_for(lambda: rank_process(run.pid), "rank 1 to start")
        if when == "while decoding":
            wait_for(lambda: decoding_started(out), "the run to start decoding")
            time.sleep(2)  # into the decoding loop
        os.kill(rank, signal.SIGKILL)
        _, stderr = run.communicate(timeout=NOTICED_WITHIN_S)
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    assert run.returncode == 1 and len(lines) == 1, stderr
    assert lines[0].startswith("error: tensor-parallel rank 1 was killed by SIGKILL"), stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "failed" and "tensor-parallel rank 1 was killed by SIGKILL" in manifest["reason"]
