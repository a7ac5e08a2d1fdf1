"""No measured request warm from the warm-up, through `ssdbench run` in a subprocess against a server on 127.0.0.1
(issue 32): the warm-up's prompt is none of the measured ones, a vLLM is asked per request for token ids and
for a prefix-cache salt of the request's own, and the prompt tokens a server says it took from its prefix cache
are recorded per request, with a warning where they are not 0."""

from __future__ import annotations

import copy

import pandas as pd
import pyarrow.parquet as pq

from misbehaving_server import good_events, run_against, sse

VLLM_MODELS = {"object": "list", "data": [{"id": "m", "owned_by": "vllm"}]}
LLAMA_MODELS = {"object": "list", "data": [{"id": "m", "owned_by": "llamacpp"}]}


def measured_prompts(tmp_path) -> list[list[int]]:
    requests = pq.read_table(tmp_path / "run" / "requests.parquet").to_pandas()
    return [list(ids) for ids in requests["prompt_token_ids"]]


def test_the_warm_up_prompt_is_not_measured_and_vllm_requests_each_have_their_own_cache_salt(tmp_path):
    bodies: list[dict] = []
    outcome = run_against(tmp_path, models=VLLM_MODELS, bodies=bodies)
    assert outcome.returncode == 0, outcome.last_error
    measured = measured_prompts(tmp_path)
    warm_up, *sent = bodies
    assert len(sent) == len(measured) == 2 and [b["prompt"] for b in sent] == measured
    assert all(warm_up["prompt"][:8] != prompt[:8] for prompt in measured)  # it shares no measured prompt's start
    assert all(body["return_token_ids"] is True for body in bodies)
    salts = [body["cache_salt"] for body in bodies]
    assert len(set(salts)) == len(bodies) and all(isinstance(s, str) and s for s in salts)


def test_llama_cpp_requests_turn_the_prompt_cache_off_and_carry_no_salt(tmp_path):
    bodies: list[dict] = []
    outcome = run_against(tmp_path, models=LLAMA_MODELS, bodies=bodies)
    assert outcome.returncode == 0, outcome.last_error
    assert all(body["cache_prompt"] is False and "cache_salt" not in body for body in bodies)


def with_cached(cached: int) -> bytes:
    events = copy.deepcopy(good_events())
    events[-1]["usage"]["prompt_tokens_details"] = {"cached_tokens": cached}
    return sse(events)


def test_cached_prompt_tokens_are_recorded_and_warned_of(tmp_path):
    cached = 5
    outcome = run_against(tmp_path, good=with_cached(0), bad=with_cached(cached))
    assert outcome.returncode == 0, outcome.last_error
    assert [row["cached_prompt_tokens"] for row in outcome.rows] == [cached, 0]
    first = outcome.rows[0]["prompt_id"]
    assert (f"warning: f@endpoint-c1: 1/2 requests found prompt tokens in the server's prefix cache (prompt {first}: "
            f"{cached} cached): their TTFT leaves out prefilling those tokens; recorded in "
            "endpoints.cached_prompt_tokens") in outcome.stdout


def test_no_warning_where_the_server_cached_nothing_or_does_not_say(tmp_path):
    outcome = run_against(tmp_path, good=with_cached(0))
    assert outcome.returncode == 0 and "prefix cache" not in outcome.stdout
    assert [row["cached_prompt_tokens"] for row in outcome.rows] == [0, 0]
    (tmp_path / "silent").mkdir()
    silent = run_against(tmp_path / "silent")
    assert silent.rows and all(pd.isna(row["cached_prompt_tokens"]) for row in silent.rows)
