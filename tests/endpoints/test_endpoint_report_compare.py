"""Endpoint runs in `report` and `compare`, against a real llama-server on 127.0.0.1 (skipped only where it is
not built): the throughput-latency figure has one point per concurrency level, computed over the concurrent
requests' decode span; an endpoint-only run reports without crashing; and `compare` pairs an endpoint run
with a native ar,sd run on the same prompts (speedup with its interval, greedy identity share)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pandas as pd
import pytest

from llama_server import free_port, require_server, server_command
from ssdbench.endpoints.launch import launched
from ssdbench.endpoints.spec import Endpoint
from ssdbench.records.reader import load_run
from ssdbench.report.pareto import endpoint_throughput_latency, union_seconds
from ssdbench.report.plots import frontier_points, stack_runs

CLI = [sys.executable, "-c", "from ssdbench.cli.main import main; main()"]
NEW_TOKENS = 12
SAME = ["--suite", "smoke", "--num-prompts", "3", "--max-new-tokens", str(NEW_TOKENS), "--ignore-eos",
        "--threads", "1"]


def ssdbench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"})


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """(endpoint-only run at concurrency 1 and 2, native ar,sd run) on the same prompts and settings."""
    require_server()
    port = free_port()
    endpoint = Endpoint("plain", f"http://127.0.0.1:{port}", launch=server_command(port, parallel=2))
    root = tmp_path_factory.mktemp("runs")
    with launched(endpoint, root / "plain.log", ready_timeout_s=120):
        served = ssdbench("run", "--methods", "none", *SAME, "--endpoint", f"plain={endpoint.url}",
                          "--concurrency", "1,2", "--out", str(root / "endpoint"))
    assert served.returncode == 0, served.stderr
    native = ssdbench("run", "--methods", "ar,sd", *SAME, "--out", str(root / "native"))
    assert native.returncode == 0, native.stderr
    return root / "endpoint", root / "native"


def test_union_of_windows_counts_overlap_once():
    assert union_seconds([0, 5e8, 3e9], [1e9, 2e9, 4e9]) == pytest.approx(3.0)  # [0, 2] and [3, 4]
    assert union_seconds([0, 0], [1e9, 1e9]) == pytest.approx(1.0)


def test_endpoint_points_use_the_decode_span_of_concurrent_requests():
    keys = {"method": "e", "suite": "s", "repeat": 0}
    requests = pd.DataFrame([{**keys, "engine": engine, "prompt_id": f"p{i}", "request_idx": i, "new_tokens": 11,
                              "ttft_ms": 100.0, "decode_ms": 1000.0, "tpot_ms": 100.0} for engine in ("endpoint-c1",
                             "endpoint-c2") for i in range(2)])
    # c1: one after the other; c2: both sent at once, so their decode windows coincide
    starts = {("endpoint-c1", 0): 0, ("endpoint-c1", 1): 2 * 10**9, ("endpoint-c2", 0): 5 * 10**9,
              ("endpoint-c2", 1): 5 * 10**9}
    endpoints = requests[["method", "engine", "suite", "prompt_id", "request_idx", "repeat"]].assign(
        status="ok", t_start_ns=[starts[(e, i)] for e, i in zip(requests["engine"], requests["request_idx"])],
        concurrency=[int(e[-1]) for e in requests["engine"]])
    points = endpoint_throughput_latency(requests, endpoints).set_index("concurrency")
    assert points.loc[1, "total_tokens_per_s"] == pytest.approx(20 / 2.0)  # 2 x 10 decode tokens over 2 s
    assert points.loc[2, "total_tokens_per_s"] == pytest.approx(20 / 1.0)  # the same tokens in one shared second
    assert (points["latency_ms"] == 100.0).all() and points.loc[2, "label"] == "e@endpoint-c2"


def test_report_draws_one_point_per_concurrency_level(runs, tmp_path):
    endpoint_run, _ = runs
    out = tmp_path / "report"
    result = ssdbench("report", str(endpoint_run), "--out", str(out))  # an endpoint-only run (--methods none)
    assert result.returncode == 0, result.stderr
    assert (out / "throughput_latency.png").is_file() and "skipped throughput_latency" not in result.stdout
    run = load_run(endpoint_run)
    points = frontier_points(stack_runs([run])).set_index("concurrency")
    requests = run.requests
    assert sorted(points.index) == [1, 2] and points["series"].tolist() == ["plain@endpoint"] * 2
    assert points["load"].tolist() == ["c=1", "c=2"]
    for level in (1, 2):
        mine = requests[requests["engine"] == f"endpoint-c{level}"]
        assert points.loc[level, "latency_ms"] == pytest.approx(mine["tpot_ms"].median())
        one_at_a_time = (NEW_TOKENS - 1) * len(mine) / (mine["decode_ms"].sum() / 1e3)
        if level == 1:  # requests in turn: their decode times add up
            assert points.loc[level, "total_tokens_per_s"] == pytest.approx(one_at_a_time)
        else:  # two in flight: overlapping time counts once, so more than in turn, at most twice as much
            assert one_at_a_time < points.loc[level, "total_tokens_per_s"] <= 2 * one_at_a_time


def test_compare_pairs_an_endpoint_run_with_a_native_run(runs):
    endpoint_run, native_run = runs
    result = ssdbench("compare", str(endpoint_run), str(native_run), "--baseline-variant", "1:ar", "--format", "json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    rows = {row["label"]: row for row in report["rows"]}
    assert set(rows) == {"0:plain@endpoint-c1", "0:plain@endpoint-c2", "1:ar", "1:sd"}
    for label in ("0:plain@endpoint-c1", "0:plain@endpoint-c2"):
        row = rows[label]
        assert row["speedup_pairs"] == 3  # paired with ar on every prompt
        assert 0 < row["speedup_low"] <= row["speedup"] <= row["speedup_high"]
        assert row["speedup_e2e"] > 0
        # llama.cpp's quantised kernels and ssdbench's fp32 may part on a near-tie: a share, computed
        assert row["outputs_match"] is not None and 0.0 <= row["outputs_match"] <= 1.0
    assert rows["1:sd"]["outputs_match"] == 1.0
    assert any("endpoint variants ran on serving engines (plain: llama.cpp serving smollm2)" in n
               for n in report["notes"])
    # pairs are the same prompts: the server read exactly the token ids the native methods read
    native = load_run(native_run).requests
    read_by_ar = native[native["method"] == "ar"].set_index("prompt_id")["prompt_token_ids"]
    sent = load_run(endpoint_run).requests
    assert len(sent) == 6 and all(list(ids) == list(read_by_ar[prompt])
                                  for prompt, ids in zip(sent["prompt_id"], sent["prompt_token_ids"]))
    text = ssdbench("compare", str(endpoint_run), str(native_run), "--baseline-variant", "1:ar")
    assert text.returncode == 0 and "run 0's endpoint variants ran on serving engines" in " ".join(text.stdout.split())
