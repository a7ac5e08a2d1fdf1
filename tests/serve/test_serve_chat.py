"""Chat completions through `ssdbench serve` on the real shipped model (SmolLM2-135M-Instruct, which has a
chat template): the messages are templated as the run templates a suite's prompt, whole and streamed."""

from __future__ import annotations

import pytest

from serve_fixtures import post, running_server, stream, streamed_ids, streamed_text

pytestmark = pytest.mark.slow
MESSAGES = [{"role": "user", "content": "Name a prime number."}]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with running_server("smollm2-135m", "ar", tmp_path_factory.mktemp("serve_chat")) as running:
        yield running


def _templated_length() -> int:
    from ssdbench.models.checkpoint.source import resolve_model
    from ssdbench.models.checkpoint.weights import load_tokenizer
    from ssdbench.suites.chat import as_id_list

    tokenizer = load_tokenizer(resolve_model("smollm2-135m"))
    return len(as_id_list(tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=True)))


def test_a_chat_answer_is_the_templated_conversations(server):
    status, body = post(server, "/v1/chat/completions", {"messages": MESSAGES, "max_tokens": 6, "temperature": 0})
    assert status == 200, body
    assert body["object"] == "chat.completion" and body["choices"][0]["message"]["role"] == "assistant"
    assert body["usage"]["prompt_tokens"] == _templated_length()
    assert "metrics" not in body  # ar drafts nothing
    events = stream(server, "/v1/chat/completions", {"messages": MESSAGES, "max_tokens": 6, "temperature": 0})
    assert events[0]["choices"][0]["delta"]["role"] == "assistant"
    assert streamed_ids(events) == body["choices"][0]["token_ids"]
    assert streamed_text(events) == body["choices"][0]["message"]["content"]
