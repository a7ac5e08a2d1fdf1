"""`ssdbench serve` under load and at its stop: 64 concurrent streams of mixed lengths with clients that
leave and bodies that are bad, then SIGTERM with a request in flight."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pandas as pd
import pytest

from serve_fixtures import get, post, running_server, stop, stream, streamed_ids

NUM_STREAMS = 64
LEAVES_EVERY = 8  # every 8th client asks for many tokens and closes its connection after two events
LEAVER_TOKENS = 480
BAD_BODIES = [b"{", b"[]", json.dumps({"prompt": [1, 2], "temperature": 9}).encode(),
              json.dumps({"prompt": [1, 2], "n": 3}).encode()]


def _prompt(i: int) -> list[int]:
    return [2 + (i * 7 + j) % 60 for j in range(3 + i % 11)]  # 3..13 tokens, distinct per request


def _max_tokens(i: int) -> int:
    return 4 + i % 9


@pytest.fixture(scope="module")
def loaded_server(tiny, tmp_path_factory):
    """A server with static batches of 4, stopped after the load: the server, each request's outcome, the bad
    bodies' statuses and /health's after the load."""
    tmp = tmp_path_factory.mktemp("serve_load")
    with running_server(tiny, "sd", tmp, "--max-batch", "4") as server:
        def one(i: int):
            leaves = i % LEAVES_EVERY == LEAVES_EVERY - 1
            body = {"prompt": _prompt(i), "max_tokens": LEAVER_TOKENS if leaves else _max_tokens(i),
                    "ignore_eos": True, "temperature": 0, "stream_options": {"include_usage": True}}
            return i, leaves, stream(server, "/v1/completions", body, stop_after_events=2 if leaves else None)

        with ThreadPoolExecutor(max_workers=NUM_STREAMS + len(BAD_BODIES)) as pool:
            bad = [pool.submit(post, server, "/v1/completions", body) for body in BAD_BODIES]
            outcomes = list(pool.map(one, range(NUM_STREAMS)))
            bad_statuses = [f.result()[0] for f in bad]
        healthy_after = get(server, "/health")[0]
    # leaving the block stopped it with SIGTERM: its records are written
    yield server, outcomes, bad_statuses, healthy_after


def test_every_stream_gets_its_own_whole_answer(loaded_server):
    _, outcomes, bad_statuses, healthy_after = loaded_server
    ids = set()
    for i, leaves, events in outcomes:
        if leaves:
            continue
        usage = events[-1]["usage"]
        assert usage["prompt_tokens"] == len(_prompt(i)), i
        assert usage["completion_tokens"] == _max_tokens(i) == len(streamed_ids(events)), i
        ids.add(events[0]["id"])
    assert len(ids) == NUM_STREAMS - NUM_STREAMS // LEAVES_EVERY  # no two answers share a request
    assert bad_statuses == [400] * len(BAD_BODIES)
    assert healthy_after == 200


def test_the_records_hold_every_request_with_what_was_streamed(loaded_server):
    server, outcomes, _, _ = loaded_server
    manifest = json.loads((server.out / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["serve"]["max_batch"] == 4
    requests = pd.read_parquet(server.out / "requests.parquet")
    assert len(requests) == NUM_STREAMS  # the leavers too; the server's own warm-up is not recorded
    recorded = {tuple(p): (list(o), r) for p, o, r in zip(requests.prompt_token_ids, requests.output_token_ids,
                                                          requests.finish_reason)}
    assert len(recorded) == NUM_STREAMS
    for i, leaves, events in outcomes:
        output, reason = recorded[tuple(_prompt(i))]
        if leaves:
            assert reason in ("abort", "length") and streamed_ids(events) == output[:len(streamed_ids(events))]
        else:
            assert output == streamed_ids(events) and reason == "length"
    assert (requests.batch_size <= 4).all() and (requests.batch_size > 1).any()
    aborted = requests[requests.finish_reason == "abort"]
    assert len(aborted) > 0 and (aborted.new_tokens < LEAVER_TOKENS).all()  # a leaver ended before its last token


def test_sigterm_lets_the_request_in_flight_finish_and_stops_the_draft_process(tiny, tmp_path):
    with running_server(tiny, "ssd", tmp_path) as server:
        result: dict = {}

        def long_request() -> None:
            result["events"] = stream(server, "/v1/completions", {"prompt": [3, 4, 5], "max_tokens": 300,
                                                                   "ignore_eos": True, "temperature": 0})

        client = threading.Thread(target=long_request)
        client.start()
        time.sleep(1.0)  # the request is decoding
        group = os.getpgid(server.process.pid)
        code = stop(server, signal.SIGTERM)
        client.join(timeout=60)
    assert code == 0, server.log_text()[-2000:]
    assert len(streamed_ids(result["events"])) == 300
    assert [c["finish_reason"] for c in result["events"][-1]["choices"]] == ["length"]
    assert _group_empties(group, within_s=10)  # nothing of the server's is left: ssd's draft process stopped too
    manifest = json.loads((server.out / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["stopped_by"] == "signal (SIGTERM)"
    requests = pd.read_parquet(server.out / "requests.parquet")
    assert list(requests.new_tokens) == [300]


def _group_empties(group: int, *, within_s: float) -> bool:
    """Whether every process of the group has exited within the time (multiprocessing's resource tracker
    leaves a moment after its parent)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.2)
    return False
