"""Well-formed JSON of the wrong shape from a server, through `ssdbench run` in a subprocess: the one request
it answered fails, recorded with the field and what came, the other request is kept, and the run ends
with its one-line summary and exit 1; a /v1/models of the wrong shape is refused before the run (exit 2).
Each case crashed the run with `internal error` before (issue 32)."""

from __future__ import annotations

import copy

import pytest

from misbehaving_server import good_events, run_against, sse


def changed(change) -> bytes:
    """The good stream with `change(events)` applied to a copy."""
    events = copy.deepcopy(good_events())
    change(events)
    return sse(events)


def first_choice(**fields):
    return lambda events: events[0]["choices"][0].update(fields)


def without_ids(events):
    for event in events:
        for choice in event["choices"]:
            choice.pop("token_ids", None)


@pytest.mark.parametrize("change, api, reason", [
    (first_choice(token_ids=["abc"]), "completions",
     "/v1/completions: choices[0].token_ids[0]: expected a token id from 0 to 2147483647, got string 'abc'"),
    (lambda events: events[0].update(choices=5), "completions", "/v1/completions: choices: expected a list, got int 5"),
    (lambda events: (without_ids(events), events[0]["choices"][0].update(text=12345)), "completions",
     "/v1/completions: choices[0].text: expected a string, got int 12345"),
    (lambda events: events[0]["choices"].__setitem__(0, {"index": 0, "delta": "Hello"}), "chat",
     "/v1/chat/completions: choices[0].delta: expected an object, got string 'Hello'"),
    (lambda events: events[2].update(usage={"completion_tokens": -3}), "completions",
     "usage.completion_tokens: expected a whole number from 0 to 2147483647, got int -3"),
    (first_choice(token_ids=[10**12]), "completions", "token_ids[0]: expected a token id"),
    (lambda events: events[2].update(usage={"completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": "x"}}),
     "completions", "usage.prompt_tokens_details.cached_tokens: expected a whole number from 0 to 2147483647, "
     "got string 'x'"),
    (lambda events: events[2].update(usage={"completion_tokens": 3, "prompt_tokens_details": [0]}), "completions",
     "usage.prompt_tokens_details: expected an object, got list [0]"),
    (first_choice(finish_reason=["stop"]), "completions", 'finish_reason: expected a string, got list ["stop"]'),
    (lambda events: events[0].update(model={"id": "m"}), "completions", "model: expected a string, got object"),
])
def test_a_wrong_shape_fails_its_request_and_the_run_goes_on(tmp_path, change, api, reason):
    outcome = run_against(tmp_path, "--endpoint-api", api, bad=changed(change))
    assert outcome.returncode == 1
    assert outcome.last_error.startswith("error: 1 endpoint request(s) failed") and reason in outcome.last_error
    assert "f@endpoint-c1: 1/2 requests ok" in outcome.stdout
    failed, kept = outcome.rows
    assert failed["status"] == "failed" and reason in failed["error"] and "\n" not in failed["error"]
    assert kept["status"] == "ok" and kept["completion_tokens"] == 3


@pytest.mark.parametrize("models, reason", [
    ([{"id": "m"}], 'the answer: expected an object, got list [{"id": "m"}]'),
    ({"data": 5}, "data: expected a list, got int 5"),
    ({"data": [{"id": 7}]}, "data[0].id: expected a string, got int 7"),
    ({"data": ["m"]}, "data[0]: expected an object, got string 'm'"),
])
def test_a_models_listing_of_the_wrong_shape_is_refused_before_the_run(tmp_path, models, reason):
    outcome = run_against(tmp_path, models=models)
    assert outcome.returncode == 2 and outcome.endpoints is None
    assert outcome.last_error.startswith("error: endpoint f: http://127.0.0.1:")
    assert outcome.last_error.endswith(f"/v1/models: {reason}")


def test_answers_naming_another_model_are_warned_of_and_recorded(tmp_path):
    other = sse(good_events(model="gpt-4-totally-different"))
    outcome = run_against(tmp_path, good=other)
    assert outcome.returncode == 0 and "f@endpoint-c1: 2/2 requests ok" in outcome.stdout
    assert outcome.stdout.count("warning: f@endpoint-c1: the server answered as model 'gpt-4-totally-different' "
                                "where 'm' was asked for (2/2 requests); both are recorded") == 1
    assert [(r["model"], r["model_asked"]) for r in outcome.rows] == [("gpt-4-totally-different", "m")] * 2


def test_answers_naming_the_model_asked_for_warn_of_nothing(tmp_path):
    outcome = run_against(tmp_path)
    assert outcome.returncode == 0 and "warning" not in outcome.stdout
    assert [(r["model"], r["model_asked"]) for r in outcome.rows] == [("m", "m")] * 2
