"""Signals and write failures, on the real entry point in real subprocesses (tiny model folders)."""

from __future__ import annotations

import json
import os
import platform
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_checks import assert_one_line_error
from cli_fixtures import save_tiny_model
from typer.testing import CliRunner

from ssdbench.cli.main import app
from ssdbench.records.writer import RunWriter

ENTRY = "from ssdbench.cli.main import main; main()"
WAIT_S = 300  # how long to wait for a state before giving up (a loaded machine is slow; nothing is timed)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return save_tiny_model(tmp_path_factory.mktemp("models") / "tiny")


def start_run(target: Path, out: Path, *extra: str, preexec_fn=None) -> subprocess.Popen:
    """`ssdbench run` that would go on for long: many repeats of 400 forced tokens."""
    args = [sys.executable, "-c", ENTRY, "run", "--target", str(target), "--suite", "smoke", "--num-prompts", "3",
            "--no-chat-template", "--max-new-tokens", "400", "--ignore-eos", "--repeats", "50", "--out", str(out), *extra]
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=preexec_fn)


def wait_until(condition, what: str):
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"gave up waiting for {what}")


def children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def draft_process(pid: int) -> int | None:
    """The spawned ssd draft server among the run's children, once it is up."""
    for child in children(pid):
        try:
            cmdline = Path(f"/proc/{child}/cmdline").read_bytes()
        except OSError:
            continue
        if b"spawn_main" in cmdline:
            return child
    return None


def is_gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
    except OSError:
        return True
    return state in ("Z", "X")


def manifest(out: Path) -> dict:
    return json.loads((out / "manifest.json").read_text())


def is_decoding(out: Path) -> bool:
    return (out / "manifest.json").is_file() and manifest(out)["status"] == "running"


@pytest.mark.skipif(not Path(f"/proc/{os.getpid()}/task/{os.getpid()}/children").exists(),
                    reason="needs /proc/PID/task/PID/children to find the draft process")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_and_sighup_interrupt_like_ctrl_c(tiny, tmp_path, sig):
    out = tmp_path / "run"
    proc = start_run(tiny, out, "--methods", "ssd")
    try:
        draft = wait_until(lambda: draft_process(proc.pid), "the draft process")
        wait_until(lambda: is_decoding(out), "the run to start")
        proc.send_signal(sig)
        _, stderr = proc.communicate(timeout=WAIT_S)
    finally:
        proc.kill()
    assert proc.returncode == 128 + sig
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert lines[-1] == (f"error: stopped by {sig.name} (any run directory in use was marked interrupted, keeping "
                         "the rounds measured so far)")
    recorded = manifest(out)
    assert recorded["status"] == "interrupted" and recorded["reason"] == f"interrupted ({sig.name})"
    wait_until(lambda: is_gone(draft), "the draft process to stop")


def test_a_run_killed_with_sigkill_reads_as_dead(tiny, tmp_path):
    runs = tmp_path / "runs"
    out = runs / "killed"
    proc = start_run(tiny, out, "--methods", "ar")
    try:
        wait_until(lambda: is_decoding(out), "the run to start")
    finally:
        proc.kill()
        proc.wait()
    assert manifest(out)["status"] == "running"  # nothing could mark it
    assert manifest(out)["process"]["pid"] == proc.pid
    dead = f"died (pid {proc.pid} on host {platform.node()} no longer running"
    runner = CliRunner()
    assert_one_line_error(runner.invoke(app, ["compare", str(out)]), dead)
    assert_one_line_error(runner.invoke(app, ["report", str(out)]), dead)
    listing = runner.invoke(app, ["ls", "--runs", str(runs), "--format", "json"])
    assert listing.exit_code == 0, listing.output
    [entry] = json.loads(listing.stdout)["runs"]
    assert entry["state"] == "died" and dead in entry["detail"]


def test_a_live_run_is_not_called_dead(tmp_path):
    writer = RunWriter.create(tmp_path / "live", "id", {})
    result = CliRunner().invoke(app, ["compare", str(writer.path)])
    assert_one_line_error(result, f"pid {os.getpid()} on host {platform.node()} is still running it")


def _small_file_limit() -> None:
    """Files past 32 KiB cannot be written (EFBIG): the manifest can, the step records cannot."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (32 * 1024, 32 * 1024))


def test_failing_to_write_records_marks_the_run_failed(tiny, tmp_path):
    out = tmp_path / "run"
    args = [sys.executable, "-c", ENTRY, "run", "--target", str(tiny), "--suite", "smoke", "--num-prompts", "3",
            "--no-chat-template", "--max-new-tokens", "200", "--ignore-eos", "--methods", "ar,sd", "--out", str(out)]
    done = subprocess.run(args, capture_output=True, text=True, preexec_fn=_small_file_limit, timeout=WAIT_S)
    assert done.returncode == 2
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert lines[-1].startswith(f"error: cannot write records in {out}") and "File too large" in lines[-1]
    recorded = manifest(out)
    assert recorded["status"] == "failed" and "File too large" in recorded["reason"]
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json"]  # no half-written table left behind


@pytest.fixture
def small_disk(tmp_path):
    """A 64 KiB tmpfs (needs the right to mount; skipped elsewhere)."""
    mount_point = tmp_path / "small"
    mount_point.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount_point)], capture_output=True)
    if done.returncode != 0:
        pytest.skip("cannot mount a small tmpfs here")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", str(mount_point)], check=True)


def fill(folder: Path) -> None:
    try:
        with open(folder / "filler", "wb", buffering=0) as f:
            while True:
                f.write(b"\0" * 4096)
    except OSError:  # full
        pass


def test_a_full_disk_still_gets_the_failed_status(small_disk):
    from ssdbench.decoding.recorder import empty_columns
    from ssdbench.errors import RunDirectoryError

    writer = RunWriter.create(small_disk / "run", "id", {"config": {"methods": ["ar"]}})
    fill(small_disk)
    with pytest.raises(RunDirectoryError, match="No space left"):
        writer.finish(empty_columns("steps"), empty_columns("requests"), [])
    recorded = manifest(writer.path)  # whole, valid JSON, written over the reserved length in place
    assert recorded["status"] == "failed" and "No space left" in recorded["reason"]
    assert sorted(p.name for p in writer.path.iterdir()) == ["manifest.json"]
