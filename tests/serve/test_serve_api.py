"""The OpenAI routes of a real `ssdbench serve --method sd` on the tiny model: answers, usage, speculation
figures, /metrics, and OpenAI-style errors with 4xx codes."""

from __future__ import annotations

import json

import pytest

from serve_fixtures import get, post, running_server, stream, streamed_ids, streamed_text

PROMPT = [5, 9, 12, 30, 7]


@pytest.fixture(scope="module")
def server(tiny, tmp_path_factory):
    with running_server(tiny, "sd", tmp_path_factory.mktemp("serve_api"), "--max-new-tokens", "8") as running:
        yield running


def _complete(server, **fields) -> tuple[int, dict]:
    return post(server, "/v1/completions", {"prompt": PROMPT, "temperature": 0, **fields})


def test_models_and_health(server):
    status, body = get(server, "/v1/models")
    models = json.loads(body)
    assert status == 200 and models["data"][0]["owned_by"] == "ssdbench"
    assert models["data"][0]["id"] == "tiny" and models["data"][0]["max_model_len"] == 512
    assert get(server, "/health")[0] == 200


def test_a_whole_answer_has_usage_ids_and_vllms_speculation_figures(server):
    status, body = _complete(server, max_tokens=10, ignore_eos=True)
    assert status == 200, body
    choice = body["choices"][0]
    assert choice["finish_reason"] == "length" and len(choice["token_ids"]) == 10
    assert body["usage"] == {"prompt_tokens": 5, "completion_tokens": 10, "total_tokens": 15,
                             "prompt_tokens_details": {"cached_tokens": 0}}
    spec = body["metrics"]["speculative_decoding"]
    assert spec["num_spec_steps"] == len(spec["per_step_accepted"]) == len(spec["per_step_drafted"]) > 0
    assert spec["num_accepted_draft_tokens"] == sum(spec["per_step_accepted"]) <= spec["num_draft_tokens"]
    assert spec["mean_acceptance_length"] == pytest.approx(1 + spec["num_accepted_draft_tokens"] / spec["num_spec_steps"])


def test_the_stream_carries_the_same_tokens_and_usage_last(server):
    _, whole = _complete(server, max_tokens=10, ignore_eos=True)
    events = stream(server, "/v1/completions", {"prompt": PROMPT, "temperature": 0, "max_tokens": 10,
                                                "ignore_eos": True, "stream_options": {"include_usage": True}})
    assert streamed_ids(events) == whole["choices"][0]["token_ids"]
    assert streamed_text(events) == whole["choices"][0]["text"]
    assert events[-1]["usage"]["completion_tokens"] == 10 and events[-1]["choices"] == []
    assert events[-1]["metrics"]["speculative_decoding"]["num_draft_tokens"] > 0
    assert [e["choices"][0]["finish_reason"] for e in events[:-1] if e["choices"]][-1] == "length"


def test_a_stop_string_ends_the_text_before_it(server):
    _, whole = _complete(server, max_tokens=10, ignore_eos=True)
    text = whole["choices"][0]["text"]
    words = text.split()
    assert len(words) >= 4, text  # the tiny tokenizer decodes each token as a word
    stop = words[2]
    _, stopped = _complete(server, max_tokens=10, ignore_eos=True, stop=[stop])
    assert stopped["choices"][0]["finish_reason"] == "stop"
    assert stopped["choices"][0]["text"] == text[:text.index(stop)]


def test_default_max_tokens_is_the_servers(server):
    _, body = _complete(server, ignore_eos=True)
    assert body["usage"]["completion_tokens"] == 8


def test_text_prompts_are_tokenised(server):
    status, body = post(server, "/v1/completions", {"prompt": "w5 w9 w12", "max_tokens": 3, "temperature": 0})
    assert status == 200 and body["usage"]["prompt_tokens"] == 3


@pytest.mark.parametrize("body, status, param", [
    ({"prompt": PROMPT, "model": "another"}, 404, "model"),
    ({"prompt": PROMPT, "temperature": -1}, 400, "temperature"),
    ({"prompt": PROMPT, "temperature": "hot"}, 400, "temperature"),
    ({"prompt": PROMPT, "top_p": 0}, 400, "top_p"),
    ({"prompt": PROMPT, "max_tokens": 0}, 400, "max_tokens"),
    ({"prompt": PROMPT, "max_tokens": 600}, 400, "max_tokens"),  # past the tiny model's 512 positions
    ({"prompt": PROMPT, "n": 2}, 400, "n"),
    ({"prompt": PROMPT, "logprobs": 3}, 400, "logprobs"),
    ({"prompt": [1, 2, 999]}, 400, "prompt"),
    ({"prompt": []}, 400, "prompt"),
    ({"prompt": PROMPT, "stop": [""]}, 400, "stop"),
    ({"prompt": 12}, 400, "prompt"),
])
def test_bad_requests_are_openai_errors(server, body, status, param):
    got, answer = post(server, "/v1/completions", body)
    assert got == status, answer
    assert answer["error"]["param"] == param and answer["error"]["code"] == status and answer["error"]["message"]


def test_bad_json_and_a_model_without_a_chat_template(server):
    status, answer = post(server, "/v1/completions", b"{not json")
    assert status == 400 and "not valid JSON" in answer["error"]["message"]
    status, answer = post(server, "/v1/chat/completions", {"messages": [{"role": "user", "content": "w1"}]})
    assert status == 400 and "chat template" in answer["error"]["message"]
    status, answer = post(server, "/v1/chat/completions", {"messages": "hi"})
    assert status == 400 and answer["error"]["param"] == "messages"


def test_metrics_count_drafts_with_vllms_names(server):
    before = _counters(get(server, "/metrics")[1].decode())
    _, body = _complete(server, max_tokens=10, ignore_eos=True)
    after = _counters(get(server, "/metrics")[1].decode())
    spec = body["metrics"]["speculative_decoding"]
    assert after["vllm:spec_decode_num_draft_tokens_total"] - before["vllm:spec_decode_num_draft_tokens_total"] \
        == spec["num_draft_tokens"]
    assert after["vllm:spec_decode_num_accepted_tokens_total"] - before["vllm:spec_decode_num_accepted_tokens_total"] \
        == spec["num_accepted_draft_tokens"]
    assert after["vllm:spec_decode_num_drafts_total"] - before["vllm:spec_decode_num_drafts_total"] \
        == spec["num_spec_steps"]
    assert after["vllm:generation_tokens_total"] - before["vllm:generation_tokens_total"] == 10


def _counters(text: str) -> dict[str, float]:
    """Sample name -> value, summed over labels, from Prometheus text."""
    totals: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name_labels, value = line.rsplit(" ", 1)
            name = name_labels.split("{", 1)[0]
            totals[name] = totals.get(name, 0.0) + float(value)
    return totals


@pytest.mark.parametrize("args, names", [
    (["--target", "/nonexistent/model"], "/nonexistent/model"),
    (["--method", "beam"], "--method"),
    (["--max-batch", "0"], "--max-batch"),
])
def test_bad_options_are_one_line_and_claim_nothing(tmp_path, args, names):
    import subprocess

    from serve_fixtures import CLI

    out = tmp_path / "records"
    result = subprocess.run([*CLI, "serve", "--port", "1", "--out", str(out), *args], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 2 and names in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not out.exists()
