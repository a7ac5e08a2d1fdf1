"""`ssdbench run --endpoint ...` end to end against real llama-servers on 127.0.0.1, in subprocesses as a
user runs it: records in the run's schema, compare across endpoints, launch/stop, and faults."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from llama_server import closed_port_url, free_port, require_server, server_command, started
from ssdbench.endpoints.wire.http import RequestFailed, get_json

CLI = [sys.executable, "-c", "from ssdbench.cli.main import main; main()"]
SMALL = ["--suite", "smoke", "--num-prompts", "2", "--max-new-tokens", "12", "--ignore-eos", "--threads", "1"]


def ssdbench(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "PYTHONUNBUFFERED": "1"})


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    require_server()
    plain = started(tmp_path_factory, "plain", parallel=2)
    spec = started(tmp_path_factory, "spec", draft=True, parallel=2)
    yield plain[0], spec[0]
    for _, context, _, _ in (plain, spec):
        context.__exit__(None, None, None)


def answers(url: str) -> bool:
    try:
        get_json(url, "/v1/models", timeout_s=2)
    except RequestFailed:
        return False
    return True


def one_line_error(result: subprocess.CompletedProcess) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert "Traceback" not in result.stderr
    assert lines and lines[-1].startswith("error: ")
    return lines[-1]


def test_endpoints_beside_ar_recorded_and_compared(servers, tmp_path):
    plain, spec = servers
    out = tmp_path / "run"
    result = ssdbench("run", "--methods", "ar", *SMALL, "--endpoint", f"plain={plain.url}",
                      "--endpoint", f"spec={spec.url}", "--concurrency", "1,2", "--out", str(out))
    assert result.returncode == 0, result.stderr
    requests = pq.read_table(out / "requests.parquet").to_pandas()
    labels = {f"{m}@{e}" if e != "native" else m for m, e in zip(requests["method"], requests["engine"])}
    assert labels == {"ar", "plain@endpoint-c1", "spec@endpoint-c1", "plain@endpoint-c2", "spec@endpoint-c2"}
    endpoint_rows = requests[requests["engine"].str.startswith("endpoint")]
    assert (endpoint_rows["new_tokens"] == 12).all() and (endpoint_rows["ttft_ms"] > 0).all()
    assert (endpoint_rows["prompt_token_ids"].map(list).tolist()
            == [list(r) for r in endpoint_rows["prompt_token_ids"]])
    table = pq.read_table(out / "endpoints.parquet").to_pandas()
    assert (table["status"] == "ok").all() and len(table) == 8
    spec_rows = table[table["method"] == "spec"]
    assert (spec_rows["acceptance_source"] == "llama.cpp timings.draft_n").all()
    assert (spec_rows["draft_tokens"] > 0).all() and spec_rows["verify_steps"].isna().all()
    assert table[table["method"] == "plain"]["acceptance_source"].isna().all()
    assert all(len(o) == len(n) for o, n in zip(table["chunk_offsets_ms"], table["chunk_tokens"]))
    for (method, engine), group in table.groupby(["method", "engine"]):
        spans = sorted((t, t + offsets[-1] * 1e6) for t, offsets in zip(group["t_start_ns"], group["chunk_offsets_ms"]))
        overlapped = spans[1][0] < spans[0][1]
        assert overlapped == (engine == "endpoint-c2"), (method, engine)  # c1: one at a time; c2: both in flight
    manifest = json.loads((out / "manifest.json").read_text())
    described = manifest["endpoints"]["endpoints"]["spec"]
    assert described["url"] == spec.url and described["model_reported"] == "smollm2"
    assert described["kind"] == "llama.cpp" and described["server_version"]
    printed = " ".join(result.stdout.split())
    assert "spec@endpoint-c1: 2/2 requests ok" in printed and "draft acceptance rate" in printed
    assert ("plain@endpoint-c1: 2/2 requests ok, 1.00 tokens per streamed chunk (from the server's usage count); "
            "no acceptance figures") in printed
    compared = ssdbench("compare", str(out), "--baseline-variant", "0:plain@endpoint-c1", "--format", "json")
    assert compared.returncode == 0, compared.stderr
    rows = {row["variant"]: row for row in json.loads(compared.stdout)["rows"]}
    assert rows["spec@endpoint-c1"]["outputs_match"] == 1.0  # greedy: the draft changes nothing
    assert rows["spec@endpoint-c1"]["speedup_pairs"] == 2


def test_a_closed_port_is_one_line_exit_2_and_claims_nothing(tmp_path):
    require_server()
    out = tmp_path / "run"
    result = ssdbench("run", "--methods", "ar", *SMALL, "--endpoint", f"gone={closed_port_url()}", "--out", str(out))
    assert result.returncode == 2
    assert "connection refused" in one_line_error(result)
    assert not out.exists()


def test_a_wrong_model_name_is_one_line_exit_2(servers, tmp_path):
    plain, _ = servers
    result = ssdbench("run", "--methods", "ar", *SMALL, "--endpoint", f"plain={plain.url}",
                      "--endpoint-model", "plain=llama-70b", "--out", str(tmp_path / "run"))
    assert result.returncode == 2
    assert "does not serve model 'llama-70b'" in one_line_error(result)


def test_launched_server_is_stopped_after_the_run(tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    out = tmp_path / "run"
    result = ssdbench("run", "--methods", "ar", *SMALL, "--endpoint", f"own={url}",
                      "--endpoint-launch", f"own={server_command(port)}", "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert not answers(url)
    manifest = json.loads((out / "manifest.json").read_text())
    assert Path(manifest["endpoints"]["endpoints"]["own"]["launch_log"]).read_text()


def test_sigterm_stops_the_launched_server(tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    process = subprocess.Popen([*CLI, "run", "--methods", "ar", *SMALL,
                                "--endpoint", f"own={url}", "--endpoint-launch", f"own={server_command(port)}",
                                "--out", str(tmp_path / "run")], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    deadline = time.monotonic() + 300
    while not answers(url) and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.2)
    assert answers(url)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 128 + signal.SIGTERM, stderr
    assert not answers(url)


def test_a_server_dying_mid_run_marks_requests_failed_and_keeps_the_rest(tmp_path_factory, tmp_path):
    require_server()
    endpoint, context, server, log = started(tmp_path_factory, "dying")
    out = tmp_path / "run"
    run = subprocess.Popen([*CLI, "run", "--methods", "ar", "--suite", "smoke",
                            "--num-prompts", "4", "--max-new-tokens", "24", "--ignore-eos", "--threads", "1",
                            "--order", "grouped", "--endpoint", f"dying={endpoint.url}", "--out", str(out)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 240
        while log.read_text(errors="replace").count("stop processing") < 3 and time.monotonic() < deadline:
            time.sleep(0.1)  # the server finished the warm-up and two recorded requests
        assert run.poll() is None, "the run ended before the server could be stopped under it"
    finally:
        context.__exit__(None, None, None)
    _, stderr = run.communicate(timeout=300)
    assert run.returncode == 1, stderr
    assert "endpoint request(s) failed" in one_line_error(subprocess.CompletedProcess([], 1, "", stderr))
    table = pq.read_table(out / "endpoints.parquet").to_pandas()
    assert (table["status"] == "ok").sum() >= 2 and (table["status"] == "failed").sum() >= 1
    assert len(table) == 4
    requests = pq.read_table(out / "requests.parquet").to_pandas()
    assert (requests["method"] == "dying").sum() == (table["status"] == "ok").sum()
    assert (requests["method"] == "ar").sum() == 4  # nothing recorded before the failure is lost


def test_endpoints_alone_with_methods_none(servers, tmp_path):
    plain, spec = servers
    out = tmp_path / "run"
    result = ssdbench("run", "--methods", "none", *SMALL, "--endpoint", f"plain={plain.url}",
                      "--endpoint", f"spec={spec.url}", "--out", str(out))
    assert result.returncode == 0, result.stderr
    requests = pq.read_table(out / "requests.parquet").to_pandas()
    assert sorted(set(requests["method"])) == ["plain", "spec"] and len(requests) == 4
    assert pq.read_table(out / "steps.parquet").num_rows == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["config"]["methods"] == [] and manifest["config"]["endpoints_only"] is True


def test_methods_none_without_an_endpoint_is_one_line():
    result = ssdbench("run", "--methods", "none", *SMALL)
    assert result.returncode == 2
    assert "--methods none runs no method" in one_line_error(result)
