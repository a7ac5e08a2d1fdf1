"""What llama-server never sends, sent by a small HTTP server on 127.0.0.1: malformed events, a stream
cut before [DONE], error statuses and error events, and chunks carrying several token ids at once (as a
speculating vLLM does with return_token_ids). The client under test is the real one."""

from __future__ import annotations

import pytest

from canned_server import CannedStream, serving
from ssdbench.endpoints.consistency import request_acceptance
from ssdbench.endpoints.records import output_ids
from ssdbench.endpoints.wire.http import RequestFailed
from ssdbench.endpoints.wire.request import Sampling, stream_completion

SAMPLING = Sampling(max_new_tokens=8, temperature=0.0, top_p=1.0, seed=0)


class Canned(CannedStream):
    pass


@pytest.fixture
def server():
    with serving(Canned) as url:
        yield url


def answer(server, body: bytes, status: int = 200):
    Canned.status, Canned.body = status, body
    return stream_completion(server, "m", [1, 2, 3], SAMPLING, timeout_s=10, read_acceptance=request_acceptance)


def events(*payloads: str) -> bytes:
    return "".join(f"data: {p}\n\n" for p in payloads).encode()


def test_several_tokens_in_one_chunk_are_counted_from_the_server_ids(server):
    done = answer(server, events('{"choices":[{"text":"ab","token_ids":[5,6]}]}',
                                 '{"choices":[{"text":"cde","token_ids":[7,8,9],"finish_reason":"length"}]}',
                                 '{"choices":[],"usage":{"completion_tokens":5}}', "[DONE]"))
    ids, source, per_chunk = output_ids(done, tokenize=lambda text: pytest.fail("server ids were given"))
    assert (ids, source, per_chunk) == ([5, 6, 7, 8, 9], "server", [2, 3])
    assert done.text == "abcde" and done.finish_reason == "length" and done.usage["completion_tokens"] == 5


def test_without_ids_the_tokenizer_counts(server):
    done = answer(server, events('{"choices":[{"text":"a b"}]}', '{"choices":[{"text":" c","finish_reason":"stop"}]}',
                                 "[DONE]"))
    ids, source, per_chunk = output_ids(done, tokenize=lambda text: [ord(c) for c in text.split()])
    assert source == "tokenizer" and per_chunk == [2, 1] and len(ids) == 3


@pytest.mark.parametrize("body, match", [
    (events('{"choices":[{"text":"a"}]}', "{not json"), "malformed event"),
    (events('{"choices":[{"text":"a"}]}', '["a list"]'), "not a JSON object"),
    (events('{"choices":[{"text":"a"}]}'), r"before \[DONE\]"),
    (events('{"error":{"message":"out of memory"}}'), "error event: out of memory"),
    (events('{"choices":[{"text":"a"}]}', "[DONE]"), "without a finish reason"),
])
def test_broken_streams_fail_the_request_in_one_line(server, body, match):
    with pytest.raises(RequestFailed, match=match) as err:
        answer(server, body)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("status, body, match", [
    (404, b'{"error":{"message":"The model `x` does not exist."}}', "HTTP 404.*does not exist"),
    (500, b"internal failure", "HTTP 500.*internal failure"),
    (401, b'{"error":"bad key"}', "HTTP 401.*bad key"),
])
def test_error_statuses_carry_the_server_message(server, status, body, match):
    with pytest.raises(RequestFailed, match=match):
        answer(server, body, status)
