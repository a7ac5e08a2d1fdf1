"""The runner's /metrics reading with vLLM's counter shapes, which cannot run here: a small HTTP server
on 127.0.0.1 streams a completion without per-request figures and serves vLLM-style counters that
count the request only a moment after its stream ended (as vLLM's stat loggers may). The runner under
test is the real one; llama-server's counters are tested for real in test_endpoint_metrics_server.py."""

from __future__ import annotations

import json

import pytest

from canned_server import CannedStream, serving
from ssdbench.decoding.recorder import Recorder
from ssdbench.decoding.workload import DecodeSettings, Workload
from ssdbench.endpoints.engines.vllm import COUNTERS as VLLM
from ssdbench.endpoints.preflight import ServerInfo
from ssdbench.endpoints.runner import EndpointRun, EndpointRunner, EndpointVariant
from ssdbench.endpoints.spec import Endpoint, EndpointPlan

TOKENS = 6
STREAM = "".join(f"data: {json.dumps(e)}\n\n" for e in (
    {"model": "m", "choices": [{"index": 0, "text": "abc", "token_ids": [1, 2, 3]}]},
    {"model": "m", "choices": [{"index": 0, "text": "def", "token_ids": [4, 5, 6], "finish_reason": "length"}]},
    {"model": "m", "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": TOKENS}})) + "data: [DONE]\n\n"


def vllm_metrics(generated: int, drafts: int, drafted: int, accepted: int, per_pos: tuple[int, ...]) -> str:
    labels = 'engine="0",model_name="m"'
    lines = ["# TYPE vllm:generation_tokens counter", f"vllm:generation_tokens_total{{{labels}}} {generated}.0",
             f"vllm:spec_decode_num_drafts_total{{{labels}}} {drafts}.0",
             f"vllm:spec_decode_num_draft_tokens_total{{{labels}}} {drafted}.0",
             f"vllm:spec_decode_num_accepted_tokens_total{{{labels}}} {accepted}.0"]
    lines += [f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{labels},position="{i}"}} {n}.0'
              for i, n in enumerate(per_pos)]
    return "\n".join(lines) + "\n"


class LaggingCounters(CannedStream):
    """Counters at 100 tokens until a completion was served, then still unchanged for `lag_reads` reads."""

    lag_reads = 2
    extra_tokens = 0  # another client's tokens counted with ours
    served = 0
    reads_since = 0

    def do_GET(self):  # noqa: N802 - the stdlib's name
        cls = type(self)
        counted = cls.served and cls.reads_since >= cls.lag_reads
        if cls.served:
            cls.reads_since += 1
        text = (vllm_metrics(100 + TOKENS + cls.extra_tokens, 12, 36, 20, (9, 7, 4)) if counted
                else vllm_metrics(100, 10, 30, 17, (8, 6, 3)))
        self.reply(200, "text/plain; version=0.0.4", text.encode())

    def do_POST(self):  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        type(self).served, type(self).reads_since = 1, 0
        self.reply(200, "text/event-stream", STREAM.encode())


@pytest.fixture
def url():
    LaggingCounters.served, LaggingCounters.reads_since, LaggingCounters.extra_tokens = 0, 0, 0
    with serving(LaggingCounters) as served:
        yield served


def run_one(url: str, concurrency: int = 1) -> dict:
    endpoint = Endpoint("v", url)
    info = ServerInfo(kind="vllm", model="m", models_listed=("m",), version=None, counters=VLLM)
    recorder = Recorder(run_id="r")
    workload = Workload(suite="s", prompt_ids=("s/0",), token_ids=((7, 8, 9),), eos_ids=frozenset(), texts=("hi",))
    runner = EndpointRunner(EndpointVariant(endpoint, info, concurrency), EndpointRun(EndpointPlan((endpoint,)),
                            {"v": info}), workload, DecodeSettings(max_new_tokens=TOKENS), recorder,
                            tokenize=lambda text: pytest.fail("the server sent ids"))
    if concurrency == 1:
        runner.run(0, [0])
    else:
        runner.run_concurrent([(0, 0)], lambda n: None)
    return {name: values[0] for name, values in recorder.endpoints.items()}


def test_counters_that_lag_the_stream_are_read_again_until_they_count_the_request(url):
    row = run_one(url)
    assert row["status"] == "ok" and row["acceptance_note"] is None
    assert row["acceptance_source"] == "prometheus /metrics (vllm:spec_decode_*)"
    assert (row["draft_tokens"], row["accepted_tokens"], row["verify_steps"]) == (6, 3, 2)
    assert row["acceptance_length"] == (3 + 2) / 2 and row["accepted_per_position"] == [1, 1, 1]
    assert row["server_prompt_tokens"] == 3


def test_counters_that_never_catch_up_are_refused(url):
    LaggingCounters.lag_reads = 1000
    try:
        row = run_one(url)
    finally:
        LaggingCounters.lag_reads = 2
    assert row["acceptance_source"] is None and row["verify_steps"] is None
    assert row["acceptance_note"] == ("/metrics (vllm:spec_decode_*) refused: the counters had counted 0 of this "
                                      f"request's {TOKENS} tokens when read")


def test_other_traffic_is_refused_and_concurrency_above_1_reads_nothing(url):
    LaggingCounters.extra_tokens = 5
    row = run_one(url)
    assert row["acceptance_source"] is None and "other traffic" in row["acceptance_note"]
    LaggingCounters.served, LaggingCounters.reads_since = 0, 0
    row = run_one(url, concurrency=2)
    assert row["acceptance_source"] is None and row["acceptance_note"] is None
    assert LaggingCounters.reads_since == 0  # nobody read /metrics after the request
