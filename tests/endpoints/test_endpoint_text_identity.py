"""Greedy identity with ar where the server sent text and no token ids (llama-server's OpenAI routes), through the
real client against a server on 127.0.0.1 and SmolLM2's own tokenizer (issue 32): the same text re-tokenised may
give other ids (`(' + ,` came back as `(',`), so the run judges such a request on its text against ar's output
decoded, says so, and leaves it out of the logit-margin check; a different text is still called different."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from canned_server import CannedStream, serving
from ssdbench.decoding.recorder import Recorder, RequestKey
from ssdbench.endpoints.consistency import request_acceptance
from ssdbench.endpoints.identity import mark_text_identity, without_text_judged
from ssdbench.endpoints.records import record_success
from ssdbench.endpoints.table import with_endpoint_figures
from ssdbench.endpoints.wire.request import Sampling, stream_completion
from ssdbench.metrics.summary import summarize
from ssdbench.report.render import exactness_line

PROMPT = [1, 2, 3]


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    from ssdbench.models.checkpoint.embedded import converted_folder, embedded_gguf_path

    return AutoTokenizer.from_pretrained(str(converted_folder(embedded_gguf_path())))


@pytest.fixture(scope="module")
def ar_ids(tokenizer) -> list[int]:
    """ar's output as two tokens whose text the tokenizer reads back as one: "ab" as "a" + "b"."""
    ids = tokenizer.encode("a", add_special_tokens=False) + tokenizer.encode("b", add_special_tokens=False)
    assert tokenizer.decode(ids) == "ab" and tokenizer.encode("ab", add_special_tokens=False) != ids
    return ids


class TextOnly(CannedStream):
    pass


def text_stream(text: str) -> bytes:
    events = [{"model": "m", "choices": [{"index": 0, "text": text, "finish_reason": "length"}]},
              {"model": "m", "choices": [], "usage": {"completion_tokens": 2}}]
    return "".join(f"data: {json.dumps(e)}\n\n" for e in events).encode() + b"data: [DONE]\n\n"


def recorded(text: str, ar_ids: list[int], tokenizer) -> Recorder:
    """ar's request and the server's on the same prompt, recorded as the run records them."""
    recorder = Recorder("text-identity")
    TextOnly.body = text_stream(text)
    with serving(TextOnly) as url:
        completion = stream_completion(url, "m", PROMPT, Sampling(2, 0.0, 1.0, 0), timeout_s=10,
                                       read_acceptance=request_acceptance)
    key = RequestKey("llama", "endpoint-c1", "smoke", "p0", 0, 0)
    record_success(recorder, key, completion, prompt_ids=PROMPT, seed=0, temperature=0.0, concurrency=1, url=url,
                   t_start_ns=1, tokenize=lambda t: tokenizer.encode(t, add_special_tokens=False))
    for name, values in recorder.requests.items():  # ar's row: the same request, ar's ids
        values.append({"method": "ar", "engine": "native", "output_token_ids": list(ar_ids)}.get(name, values[0]))
    mark_text_identity(recorder.endpoints, recorder.requests, lambda ids: tokenizer.decode(ids))
    return recorder


def summary_of(recorder: Recorder) -> pd.DataFrame:
    requests, steps = pd.DataFrame(recorder.requests), pd.DataFrame(recorder.steps)
    return with_endpoint_figures(summarize(requests, steps), pd.DataFrame(recorder.endpoints), requests, steps)


def test_the_same_text_is_identical_though_its_re_tokenised_ids_differ(tokenizer, ar_ids):
    recorder = recorded("ab", ar_ids, tokenizer)
    assert recorder.requests["output_token_ids"][0] != ar_ids  # the re-tokenised ids are not ar's
    assert recorder.endpoints["token_source"] == ["tokenizer"] and recorder.endpoints["text_matches_ar"] == [True]
    row = summary_of(recorder).set_index("label").loc["llama@endpoint-c1"]
    assert row["outputs_match"] == 1.0 and row["identity_on"] == "text"
    line = exactness_line(summary_of(recorder), greedy=True, divergences=[])
    assert line.startswith("Greedy outputs identical to ar") and "llama@endpoint-c1 100% on text" in line
    assert "llama@endpoint-c1: judged on the text, as the server sent no token ids" in line
    kept = without_text_judged(recorder.requests, recorder.endpoints)  # no logit margin read at re-tokenised ids
    assert kept["method"] == ["ar"]


def test_another_text_is_not_identical(tokenizer, ar_ids):
    recorder = recorded("ac", ar_ids, tokenizer)
    assert recorder.endpoints["text_matches_ar"] == [False]
    line = exactness_line(summary_of(recorder), greedy=True, divergences=[])
    assert line.startswith("Greedy outputs NOT all identical to ar") and "llama@endpoint-c1 0% on text" in line
