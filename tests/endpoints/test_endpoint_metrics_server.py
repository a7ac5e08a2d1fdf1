"""The /metrics acceptance fallback against a real llama-server started with `--metrics` and its draft
(two slots, so a second request can run beside the measured one): verify steps counted, the counters'
draft tokens equal to the request's own `timings.draft_n`, the refusal when other traffic moved the
counters, and the whole path through `ssdbench run`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import pyarrow.parquet as pq
import pytest

from llama_server import code_prompt_ids, require_server, started
from ssdbench.endpoints.consistency import request_acceptance
from ssdbench.endpoints.counter_acceptance import counted
from ssdbench.endpoints.engines import llama_cpp
from ssdbench.endpoints.engines.llama_cpp import COUNTERS as LLAMA_CPP
from ssdbench.endpoints.engines.registry import counters_in
from ssdbench.endpoints.preflight import probe
from ssdbench.endpoints.wire.http import get_text
from ssdbench.endpoints.wire.prometheus import parse_samples
from ssdbench.endpoints.wire.request import Sampling, stream_completion

CLI = [sys.executable, "-c", "from ssdbench.cli.main import main; main()"]
COUNTED_SOURCE = "prometheus /metrics (llamacpp:spec_decode_*)"


def greedy(tokens: int) -> Sampling:
    return Sampling(max_new_tokens=tokens, temperature=0.0, top_p=1.0, seed=0, ignore_eos=True)


@pytest.fixture(scope="module")
def metered(tmp_path_factory):
    require_server()
    endpoint, context = started(tmp_path_factory, "metered", draft=True, parallel=2, metrics=True)[:2]
    yield endpoint
    context.__exit__(None, None, None)


@pytest.fixture(scope="module")
def prompt_ids():
    require_server()
    return code_prompt_ids()


def counters(endpoint):
    return counters_in(get_text(endpoint.url, "/metrics", timeout_s=10))


def complete(endpoint, prompt_ids, tokens):
    return stream_completion(endpoint.url, "smollm2", prompt_ids, greedy(tokens), timeout_s=120,
                             read_acceptance=request_acceptance, extra={"cache_prompt": False})


def test_preflight_finds_the_counters_and_says_so(metered):
    info = probe(metered)
    assert info.counters is LLAMA_CPP
    assert info.describe()["acceptance_from_metrics"].startswith("fallback available: llamacpp:spec_decode_*")


def test_preflight_without_metrics_means_no_fallback(tmp_path_factory):
    endpoint, context = started(tmp_path_factory, "unmetered")[:2]
    try:
        info = probe(endpoint)
    finally:
        context.__exit__(None, None, None)
    assert info.counters is None
    assert info.counters_note.startswith("no fallback: GET /metrics failed (HTTP 501")


@pytest.mark.parametrize("tokens", [12, 20, 28])
def test_counters_around_one_request_give_its_verify_steps_and_its_own_draft_count(metered, prompt_ids, tokens):
    before = counters(metered)
    done = complete(metered, prompt_ids, tokens)
    after = counters(metered)
    reading, note = counted(before, after, done.usage["completion_tokens"])
    own = done.acceptance
    assert note is None and own.source == llama_cpp.SOURCE
    assert reading.source == COUNTED_SOURCE
    assert reading.verify_steps > 0
    assert (reading.draft_tokens, reading.accepted_tokens) == (own.draft_tokens, own.accepted_tokens)
    assert reading.acceptance_length == (reading.accepted_tokens + reading.verify_steps) / reading.verify_steps
    assert sum(reading.accepted_per_position) == reading.accepted_tokens
    # the prompt's pass yields the first token, each verify step its accepted drafts plus one, and a step
    # with no draft (near the token budget's end) one more: verify steps never account for more tokens
    assert 1 + reading.verify_steps + reading.accepted_tokens <= tokens


def test_another_request_running_meanwhile_is_refused(metered, prompt_ids):
    beside: list = []
    thread = threading.Thread(target=lambda: beside.append(complete(metered, prompt_ids, 24)))
    thread.start()
    deadline = time.monotonic() + 60
    while processing(metered) < 1 and time.monotonic() < deadline:  # the other request is decoding
        time.sleep(0.01)
    before = counters(metered)
    done = complete(metered, prompt_ids, 64)  # outlasts the other one, which ends inside it
    after = counters(metered)
    thread.join(60)
    assert beside and beside[0].finish_reason == "length"
    reading, note = counted(before, after, done.usage["completion_tokens"])
    assert reading is None
    assert note.startswith("/metrics (llamacpp:spec_decode_*) refused: other traffic moved the counters")


def processing(endpoint) -> float:
    samples = parse_samples(get_text(endpoint.url, "/metrics", timeout_s=10))
    return sum(s.value for s in samples if s.name == "llamacpp:requests_processing")


def test_run_records_the_joined_reading_at_concurrency_1_only(metered, tmp_path):
    out = tmp_path / "run"
    result = subprocess.run([*CLI, "run", "--methods", "none", "--suite", "smoke", "--num-prompts", "2",
                             "--max-new-tokens", "12", "--ignore-eos", "--threads", "1",
                             "--endpoint", f"spec={metered.url}", "--concurrency", "1,2", "--out", str(out)],
                            capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert result.returncode == 0, result.stderr
    table = pq.read_table(out / "endpoints.parquet").to_pandas()
    at_1, at_2 = table[table["engine"] == "endpoint-c1"], table[table["engine"] == "endpoint-c2"]
    assert (at_1["acceptance_source"] == f"{llama_cpp.SOURCE} + {COUNTED_SOURCE}").all()
    assert (at_1["verify_steps"] > 0).all() and at_1["acceptance_note"].isna().all()
    assert all(sum(p) == a for p, a in zip(at_1["accepted_per_position"], at_1["accepted_tokens"]))
    assert (at_2["acceptance_source"] == llama_cpp.SOURCE).all() and at_2["verify_steps"].isna().all()
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["endpoints"]["endpoints"]["spec"]["acceptance_from_metrics"].startswith("fallback available")
    printed = " ".join(result.stdout.split())
    assert "spec@endpoint-c1" in printed and "acceptance length" in printed
    assert f"[from {llama_cpp.SOURCE} + {COUNTED_SOURCE}]" in printed
