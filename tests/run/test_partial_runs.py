"""A run stopped part-way (Ctrl-C, SIGTERM, a killed ssd draft process, a dead tensor-parallel rank) keeps
the requests and rounds it measured, says so in its manifest, and `report` and `compare` read it, labelled
partial. Real subprocesses through the real entry point; the stop comes right after the second request
is recorded, so what must be kept is known exactly."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from cli_checks import assert_one_line_error
from cli_fixtures import save_tiny_model
from typer.testing import CliRunner

from ssdbench.cli.main import app

WAIT_S = 600  # a loaded machine is slow; nothing is timed
STOP_AFTER = 2  # requests recorded before the stop
# The real entry point, with the stop placed after the second recorded request: a signal sent to this very
# process, or the death of its helper processes (ssd's draft, tensor-parallel ranks), as SIGKILL would do it.
ENTRY = """
import multiprocessing, os, signal, sys
from ssdbench.decoding.recorder import Recorder
how, after = sys.argv.pop(1), int(sys.argv.pop(1))
record = Recorder.add_request
def add_request(self, *args, **kwargs):
    record(self, *args, **kwargs)
    if len(self.requests["request_idx"]) == after:
        if how == "kill-children":
            for child in multiprocessing.active_children():
                child.kill()
                child.join()
        else:
            os.kill(os.getpid(), getattr(signal, how))
Recorder.add_request = add_request
from ssdbench.cli.main import main
main()
"""

runner = CliRunner()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return save_tiny_model(tmp_path_factory.mktemp("models") / "tiny")


def stopped_run(target: Path, out: Path, how: str, *extra: str) -> subprocess.CompletedProcess:
    args = [sys.executable, "-c", ENTRY, how, str(STOP_AFTER), "run", "--target", str(target), "--suite", "smoke",
            "--num-prompts", "3", "--no-chat-template", "--max-new-tokens", "12", "--ignore-eos", "--repeats", "3",
            "--out", str(out), *extra]
    return subprocess.run(args, capture_output=True, text=True, timeout=WAIT_S, preexec_fn=_ctrl_c_as_in_a_terminal)


def _ctrl_c_as_in_a_terminal() -> None:
    """SIGINT at its default, as in a foreground job: a shell starts background jobs (a CI runner may
    too) with SIGINT ignored, and Python keeps an ignored SIGINT ignored."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def last_line(text: str) -> str:
    return [line for line in text.splitlines() if line.strip()][-1]


@pytest.mark.parametrize("how,extra,code,status,reason", [
    ("SIGINT", ("--methods", "ar"), 130, "interrupted", "interrupted (SIGINT, Ctrl-C)"),
    ("SIGTERM", ("--methods", "ar"), 143, "interrupted", "interrupted (SIGTERM)"),
    ("kill-children", ("--methods", "ssd"), 1, "failed", "DraftServerError"),
    ("kill-children", ("--methods", "ar", "--tp", "2"), 1, "failed", "tensor-parallel rank 1 was killed by SIGKILL"),
], ids=["sigint", "sigterm", "killed-ssd-draft", "dead-tp-rank"])
def test_a_stopped_run_keeps_what_it_measured(tiny, tmp_path, how, extra, code, status, reason):
    out = tmp_path / "run"
    done = stopped_run(tiny, out, how, *extra)
    assert done.returncode == code, done.stderr
    assert last_line(done.stderr).startswith("error: "), done.stderr
    if how == "SIGINT":
        assert last_line(done.stderr) == ("error: stopped by SIGINT, Ctrl-C (any run directory in use was marked "
                                          "interrupted, keeping the rounds measured so far)")
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == status and reason in manifest["reason"], manifest["reason"]
    requests = pq.read_table(out / "requests.partial.parquet").to_pandas()
    steps = pq.read_table(out / "steps.partial.parquet").to_pandas()
    assert len(requests) == STOP_AFTER == manifest["partial"]["requests"]
    assert len(steps) == manifest["partial"]["rounds"]
    assert len(steps) >= requests["rounds"].sum() > 0  # every finished request's rounds, and any of the next batch
    if how.startswith("SIG"):
        assert len(steps) == requests["rounds"].sum()  # stopped between batches: nothing more was measured

    compared = runner.invoke(app, ["compare", str(out)])
    assert compared.exit_code == 0, compared.output
    assert f"run 0 is PARTIAL ({status}" in compared.output and f"{STOP_AFTER} of 9 request(s)" in compared.output
    report = runner.invoke(app, ["report", str(out), "--out", str(tmp_path / "report")])
    assert report.exit_code == 0, report.output
    assert f"partial run {out}" in report.output
    assert "Partial run" in (tmp_path / "report" / "report.html").read_text()


@pytest.fixture(scope="module")
def interrupted(tiny, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("partial") / "run"
    assert stopped_run(tiny, out, "SIGINT", "--methods", "ar,sd").returncode == 130
    return out


def test_a_gate_and_an_export_refuse_a_partial_run(interrupted, tmp_path):
    gate = runner.invoke(app, ["compare", "--baseline", str(interrupted), str(interrupted), "--fail-on",
                               "decode_tokens_per_s:-5%"])
    assert_one_line_error(gate, "--fail-on needs complete runs", "stopped early (partial)")
    export = runner.invoke(app, ["export", str(interrupted), "--out", str(tmp_path / "answers")])
    assert_one_line_error(export, "not a complete run", "interrupted (SIGINT, Ctrl-C)", "partial tables")


def test_a_partial_table_changed_after_the_run_is_refused(interrupted, tmp_path):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(interrupted, copy)
    table = pq.read_table(copy / "requests.partial.parquet")
    pq.write_table(table.slice(0, 1), copy / "requests.partial.parquet")
    assert_one_line_error(runner.invoke(app, ["compare", str(copy)]), "requests.partial.parquet",
                          "does not match the sha256")
