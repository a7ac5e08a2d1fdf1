"""A new serving engine is one declaration and one registry line: an engine made up here ("toyserve", its own
`owned_by`, request field, response shape, /metrics counters and self-report route) is registered for the test's
duration, and the real preflight, runner and summary, pointed at a small HTTP server on 127.0.0.1 that answers in
toyserve's format, recognise it and read its acceptance. Without the line, the same server is an
openai-compatible one whose figures nobody reads, which is what keeps this test able to fail."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from canned_server import CannedStream, serving
from ssdbench.cli import inspect
from ssdbench.decoding.recorder import Recorder
from ssdbench.decoding.workload import DecodeSettings, Workload
from ssdbench.endpoints.acceptance import Acceptance, count, number, object_or_empty
from ssdbench.endpoints.counters import CounterNames
from ssdbench.endpoints.engines import registry
from ssdbench.endpoints.engines.base import Engine
from ssdbench.endpoints.preflight import probe
from ssdbench.endpoints.runner import EndpointRun, EndpointRunner, EndpointVariant
from ssdbench.endpoints.spec import Endpoint, EndpointPlan
from ssdbench.endpoints.summary import acceptance_lines

SOURCE = "toyserve spec"
TOKENS = 6


def from_toy(event: dict) -> Acceptance | None:
    toy = object_or_empty(event.get("toy_spec"))
    if "steps" not in toy:
        return None
    return Acceptance(SOURCE, draft_tokens=count(toy.get("drafted"), "toy_spec.drafted"),
                      accepted_tokens=count(toy.get("accepted"), "toy_spec.accepted"),
                      verify_steps=count(toy["steps"], "toy_spec.steps"),
                      acceptance_length=number(toy.get("length"), "toy_spec.length"))


TOYSERVE = Engine(
    "toyserve", owned_by=("toyserve",), acceptance_source=SOURCE, note="made up by a test",
    readers=((SOURCE, from_toy),), request_fields={"toy_figures": True},
    counters=CounterNames("toy:spec_*", "toy:generated", "toy:drafted", "toy:accepted", "toy:drafts", "toy:per_pos"),
    self_report_route="/toy/info", version_key="release",
    dtype_of=lambda info, metrics: info.get("dtype") if isinstance(info, dict) else None,
)


def events(asked_figures: bool) -> bytes:
    final = {"model": "m", "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": TOKENS}}
    if asked_figures:  # the server sends its figures only to a request that carried toyserve's field
        final["toy_spec"] = {"steps": 3, "drafted": 6, "accepted": 3, "length": 2.0}
    last = {"index": 0, "text": "def", "token_ids": [4, 5, 6], "finish_reason": "length"}
    chunks = ({"model": "m", "choices": [{"index": 0, "text": "abc", "token_ids": [1, 2, 3]}]},
              {"model": "m", "choices": [last]}, final)
    return ("".join(f"data: {json.dumps(e)}\n\n" for e in chunks) + "data: [DONE]\n\n").encode()


class ToyServe(CannedStream):
    """toyserve's routes: /v1/models (owned_by "ToyServe"), its self-report, its counters and a streamed completion."""

    bodies: list[dict] = []

    def do_GET(self):  # noqa: N802 - the stdlib's name
        routes = {"/v1/models": {"object": "list", "data": [{"id": "m", "owned_by": "ToyServe"}]},
                  "/toy/info": {"release": "toy-1.2", "dtype": "bfloat16"}}
        if self.path in routes:
            self.reply(200, "application/json", json.dumps(routes[self.path]).encode())
        elif self.path == "/metrics":
            text = "toy:generated_total 10\ntoy:drafted_total 4\ntoy:accepted 2\ntoy:drafts_total 2\n"
            self.reply(200, "text/plain; version=0.0.4", text.encode())
        else:
            self.reply(404, "application/json", b'{"error": {"message": "no such route"}}')

    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        type(self).bodies.append(body)
        self.reply(200, "text/event-stream", events(body.get("toy_figures") is True))


@pytest.fixture
def url():
    ToyServe.bodies = []
    with serving(ToyServe) as served:
        yield served


@pytest.fixture
def toyserve_registered(monkeypatch):
    """The one registry line, for this test's duration: toyserve before the fallback."""
    monkeypatch.setattr(registry, "ENGINES", (*registry.ENGINES[:-1], TOYSERVE, registry.ENGINES[-1]))


def run_one(url: str) -> tuple[object, dict]:
    endpoint = Endpoint("toy", url)
    info = probe(endpoint)
    run = EndpointRun(EndpointPlan((endpoint,)), {"toy": info})
    workload = Workload(suite="s", prompt_ids=("s/0",), token_ids=((7, 8, 9),), eos_ids=frozenset(), texts=("hi",))
    recorder = Recorder(run_id="r")
    runner = EndpointRunner(EndpointVariant(endpoint, info, 1), run, workload, DecodeSettings(max_new_tokens=TOKENS),
                            recorder, tokenize=lambda text: pytest.fail("the server sent ids"))
    runner.run(0, [0])
    return info, recorder.endpoints


def test_a_registered_engine_is_recognised_asked_and_read(url, toyserve_registered):
    info, table = run_one(url)
    assert (info.kind, info.version, info.dtype) == ("toyserve", "toy-1.2", "bfloat16")
    assert info.counters is TOYSERVE.counters and "toy:spec_*" in info.counters_note
    assert ToyServe.bodies[-1]["toy_figures"] is True  # its request field went with the request
    row = {name: values[0] for name, values in table.items()}
    assert row["status"] == "ok" and row["acceptance_source"] == SOURCE
    figures = ("draft_tokens", "accepted_tokens", "verify_steps", "acceptance_length")
    assert tuple(row[name] for name in figures) == (6, 3, 3, 2.0)
    assert any(f"[from {SOURCE}]" in line for line in acceptance_lines(pd.DataFrame(table)))
    assert {"name": "toyserve", "acceptance": SOURCE, "note": "made up by a test"} in inspect._endpoint_kinds()


def test_its_counters_are_the_fallback_it_declares(toyserve_registered):
    reading = registry.counters_in("toy:generated_total 10\ntoy:drafted 4\ntoy:accepted 2\ntoy:drafts 2\n")
    assert reading is not None and reading.names is TOYSERVE.counters and reading.drafts == 2.0


def test_without_its_registry_line_the_same_server_is_openai_compatible(url):
    info, table = run_one(url)
    assert info.kind == "openai-compatible" and info.version is None and info.counters is None
    assert "toy_figures" not in ToyServe.bodies[-1]
    assert table["acceptance_source"] == [None]
    assert registry.read({"toy_spec": {"steps": 3, "drafted": 6, "accepted": 3}}) is None
