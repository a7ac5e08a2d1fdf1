"""Fuzzed answers through the real endpoint client, against a server on 127.0.0.1 in the test: the engines'
formats (endpoint_fuzz_cases) with fields removed, retyped, made huge, negative, NaN or nested wrongly.
Whatever comes, a request fails in one line or is recorded (its figures valid or marked invalid), a
/v1/models is refused in one line, and the records are written in the run's schema: nothing escapes as an
internal error. Seeded and bounded: a fixed set of cases, loopback only, in seconds, then the same kind
of answers through `ssdbench run` itself in one subprocess."""

from __future__ import annotations

import os
import random
import subprocess

import pandas as pd
import pyarrow.parquet as pq
import pytest

from canned_server import CannedStream, serving
from endpoint_fuzz_cases import STREAMS, dumped, metrics, models, mutated, mutated_metrics
from misbehaving_server import CLI, SMALL
from ssdbench.decoding.recorder import Recorder
from ssdbench.decoding.workload import DecodeSettings, Workload
from ssdbench.endpoints.preflight import EndpointError, probe
from ssdbench.endpoints.runner import EndpointRun, EndpointRunner, EndpointVariant
from ssdbench.endpoints.spec import Endpoint, EndpointPlan
from ssdbench.endpoints.summary import acceptance_lines, model_warnings, prompt_token_warnings
from ssdbench.records.writer import RunWriter

SEED = 32
NUM_STREAMS, NUM_LISTINGS, NUM_METRICS, NUM_CLI = 160, 40, 24, 30
WORKLOAD = Workload(suite="s", prompt_ids=("s/0",), token_ids=((7, 8, 9),), eos_ids=frozenset(), texts=("hi",))


def sse_text(events: list) -> bytes:
    return ("".join(f"data: {dumped(e)}\n\n" for e in events) + "data: [DONE]\n\n").encode()


def stream_case(rng: random.Random) -> tuple[str, str, bytes]:
    """(engine format, API, a stream with one event mutated one to three times)."""
    name = rng.choice(sorted(STREAMS))
    make, api = STREAMS[name]
    events = make()
    i = rng.randrange(len(events))
    events[i] = mutated(events[i], rng, times=rng.choice((1, 1, 2, 3)))
    return name, api, sse_text(events)


class Fuzzed(CannedStream):
    listing = dumped(models("vllm")).encode()
    metrics_seed: int | None = None  # with a seed, /metrics counts requests with one line mutated by it
    family = "vllm"
    streams: list[bytes] = [sse_text(STREAMS["vllm completions"][0]())]
    posts = 0

    def do_GET(self):  # noqa: N802 - the stdlib's name
        cls = type(self)
        if self.path == "/v1/models":
            self.reply(200, "application/json", cls.listing)
        elif self.path == "/metrics" and cls.metrics_seed is not None:
            text = mutated_metrics(metrics(cls.family, cls.posts), random.Random(cls.metrics_seed))
            self.reply(200, "text/plain; version=0.0.4", text.encode())
        else:
            self.reply(404, "application/json", b'{"error": {"message": "no such route"}}')

    def do_POST(self):  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        cls = type(self)
        body = cls.streams[cls.posts % len(cls.streams)]
        cls.posts += 1
        self.reply(200, "text/event-stream", body)


@pytest.fixture
def server():
    with serving(Fuzzed) as url:
        yield url
    answer()


def answer(**fields) -> None:
    """What the server answers from now on: the good vLLM answers, but for `fields`."""
    defaults = {"listing": dumped(models("vllm")).encode(), "metrics_seed": None, "family": "vllm",
                "streams": [sse_text(STREAMS["vllm completions"][0]())], "posts": 0}
    for name, value in {**defaults, **fields}.items():
        setattr(Fuzzed, name, value)


def one_request(url: str, tmp_path, case: int, api: str = "completions") -> dict | None:
    """Probe, send one request, record it, write the records and the summary lines: the request's endpoints
    row, or None where the probe refused the endpoint."""
    endpoint = Endpoint("f", url, api=api)
    try:
        info = probe(endpoint, timeout_s=5)
    except EndpointError as err:
        assert "\n" not in str(err) and str(err).startswith("endpoint f: ")
        return None
    plan = EndpointPlan((endpoint,), request_timeout_s=10)
    recorder = Recorder(run_id=f"fuzz-{case}")
    runner = EndpointRunner(EndpointVariant(endpoint, info, 1), EndpointRun(plan, {"f": info}), WORKLOAD,
                            DecodeSettings(max_new_tokens=3), recorder, tokenize=lambda text: [ord(c) for c in text])
    runner.run(0, [0])
    (row,) = pd.DataFrame(recorder.endpoints).to_dict("records")
    assert row["status"] in ("ok", "failed") and "\n" not in (row["error"] or "")
    endpoints = pd.DataFrame(recorder.endpoints)
    acceptance_lines(endpoints), model_warnings(endpoints), prompt_token_warnings(endpoints,
                                                                                  pd.DataFrame(recorder.requests))
    writer = RunWriter.create(tmp_path / f"run-{case}", recorder.run_id, {"config": {"temperature": 0.0}})
    writer.finish(recorder.steps, recorder.requests, [], optional={"endpoints": recorder.endpoints})
    return row


def outcome(row: dict | None) -> str:
    if row is None:
        return "refused"
    return row["status"] if row["status"] == "failed" or pd.isna(row["acceptance_invalid"]) else "invalid figures"


def test_fuzzed_streams_fail_or_are_recorded(server, tmp_path):
    rng, seen = random.Random(SEED), set()
    for case in range(NUM_STREAMS):
        name, api, body = stream_case(rng)
        answer(streams=[body])
        try:
            seen.add(outcome(one_request(server, tmp_path, case, api)))
        except AssertionError:
            raise
        except Exception as err:  # what the CLI would print as an internal error: show the case that made it
            pytest.fail(f"case {case} ({name}): {type(err).__name__}: {err}\n{body[:2000]!r}")
    assert seen == {"ok", "failed", "invalid figures"}  # the cases reach every outcome


def test_fuzzed_model_listings_are_used_or_refused(server, tmp_path):
    rng, seen = random.Random(SEED + 1), set()
    for case in range(NUM_LISTINGS):
        listing = mutated(models(rng.choice(("vllm", "llamacpp", "sglang"))), rng, times=rng.choice((1, 2)))
        answer(listing=dumped(listing).encode())
        seen.add(outcome(one_request(server, tmp_path, case)))
    assert {"refused", "ok"} <= seen


def test_fuzzed_metrics_are_taken_or_refused(server, tmp_path):
    rng, taken, refused = random.Random(SEED + 2), 0, 0
    for case in range(NUM_METRICS):
        family = rng.choice(("vllm", "llamacpp"))
        answer(family=family, metrics_seed=rng.randrange(2**32), listing=dumped(models(family)).encode(),
               streams=[sse_text(STREAMS["chat"][0]())])  # no figures of its own: the counters' reading alone
        row = one_request(server, tmp_path, case)
        assert row is not None and row["status"] == "ok"
        if isinstance(row["acceptance_note"], str):
            assert row["acceptance_note"].startswith(f"/metrics ({family}") and pd.isna(row["acceptance_source"])
            refused += 1
        elif isinstance(row["acceptance_source"], str):
            assert (row["draft_tokens"], row["accepted_tokens"], row["verify_steps"]) == (2, 1, 1)
            taken += 1
    assert taken and refused


def test_fuzzed_answers_through_the_cli(server, tmp_path):
    rng = random.Random(SEED + 3)
    cases = [stream_case(rng) for _ in range(NUM_CLI)]
    answer(streams=[sse_text(STREAMS["vllm completions"][0]())] + [body for _, api, body in cases
                                                                    if api == "completions"])
    out = tmp_path / "run"
    small = [a if a != "2" else "6" for a in SMALL]  # 6 prompts
    result = subprocess.run([*CLI, "run", "--methods", "none", *small, "--repeats", "4",
                             "--endpoint", f"f={server}", "--out", str(out)], capture_output=True, text=True,
                            timeout=300, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert "internal error" not in result.stderr and "Traceback" not in result.stderr, result.stderr
    assert result.returncode in (0, 1)
    table = pq.read_table(out / "endpoints.parquet").to_pandas()
    assert len(table) == 24 and set(table["status"]) <= {"ok", "failed"}
    assert f"f@endpoint-c1: {int((table['status'] == 'ok').sum())}/24 requests ok" in " ".join(result.stdout.split())
