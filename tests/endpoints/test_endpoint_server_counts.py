"""What the endpoint summary counts, from the server's own numbers and labelled with their source, through
`ssdbench run` in a subprocess against a server on 127.0.0.1 (issue 32): tokens per streamed chunk from the
server's ids or its usage count (not the re-tokenised text), the acceptance length labelled per drafted step
with tokens per target pass beside it, and the /metrics fallback's figures in the table as well as the footer."""

from __future__ import annotations

from misbehaving_server import run_against, sse

TOKENS, STEPS, DRAFTED, ACCEPTED = 6, 1, 3, 2  # per request: 1 token from prefill, 1 step of 3 drafted 2 accepted


def text_only(chunks: list[str], completion_tokens: int) -> bytes:
    """A stream as llama-server's /v1/completions sends it: text, no token ids, the usage count at the end."""
    events = [{"model": "m", "choices": [{"index": 0, "text": text, "finish_reason": None}]} for text in chunks]
    events[-1]["choices"][0]["finish_reason"] = "length"
    return sse(events + [{"model": "m", "choices": [], "usage": {"completion_tokens": completion_tokens}}])


def with_ids(per_chunk: list[list[int]]) -> bytes:
    events = [{"model": "m", "choices": [{"index": 0, "text": f"t{n}", "token_ids": ids, "finish_reason": None}]}
              for n, ids in enumerate(per_chunk)]
    events[-1]["choices"][0]["finish_reason"] = "length"
    tokens = sum(len(ids) for ids in per_chunk)
    return sse(events + [{"model": "m", "choices": [], "usage": {"completion_tokens": tokens}}])


def test_tokens_per_chunk_come_from_the_servers_usage_count_where_it_sent_text_only(tmp_path):
    chunks, counted = ["Hello world, this is", " fine"], 7  # the server says 7 tokens came in these 2 chunks
    outcome = run_against(tmp_path, good=text_only(chunks, counted))
    assert outcome.returncode == 0, outcome.last_error
    assert (outcome.rows[0]["token_source"], outcome.rows[0]["completion_tokens"]) == ("tokenizer", counted)
    per_chunk = counted / len(chunks)
    assert f"{per_chunk:.2f} tokens per streamed chunk (from the server's usage count)" in outcome.stdout


def test_tokens_per_chunk_come_from_the_servers_ids_where_it_sent_them(tmp_path):
    per_chunk = [[5, 6, 7], [8], [9, 10]]
    outcome = run_against(tmp_path, good=with_ids(per_chunk))
    assert outcome.returncode == 0, outcome.last_error
    mean = sum(map(len, per_chunk)) / len(per_chunk)
    assert f"{mean:.2f} tokens per streamed chunk (from the server's token ids)" in outcome.stdout


def vllm_counters(posts: int) -> str:
    """vLLM's counters after `posts` requests, each of TOKENS tokens with one verify step that drafted."""
    labels = 'engine="0",model_name="m"'
    values = {"generation_tokens": TOKENS, "spec_decode_num_drafts": STEPS, "spec_decode_num_draft_tokens": DRAFTED,
              "spec_decode_num_accepted_tokens": ACCEPTED}
    return "".join(f"vllm:{name}_total{{{labels}}} {per * posts}.0\n" for name, per in values.items())


def test_the_metrics_fallback_fills_the_table_with_acceptance_and_tokens_per_target_pass(tmp_path):
    outcome = run_against(tmp_path, good=with_ids([[n] for n in range(TOKENS)]), metrics=vllm_counters)
    assert outcome.returncode == 0, outcome.last_error
    length = (ACCEPTED + STEPS) / STEPS  # per step that drafted, as vLLM counts it
    passes = TOKENS - ACCEPTED  # prefill included: each pass commits one token beside its accepted drafts
    per_pass = (TOKENS - 1) / (passes - 1)  # decode tokens over decode passes, as ssdbench's accept len
    assert length != per_pass
    assert [row["target_passes"] for row in outcome.rows] == [passes, passes]
    assert "f@endpoint-c1 │" in outcome.stdout, outcome.stdout  # its row of the table
    cells = [c.strip() for c in outcome.stdout.split("f@endpoint-c1 │", 1)[1].split("└", 1)[0].split("│")]
    assert f"{length:.2f}" in cells and f"{per_pass:.2f}" in cells and f"{ACCEPTED / DRAFTED:.1%}" in cells
    assert (f"acceptance length {length:.2f} per drafted step (mean per request; the steps that drafted, as vLLM and "
            f"aiperf count it); {per_pass:.2f} tokens per target pass (completion tokens over target passes, "
            "comparable with ssdbench's accept len) [from prometheus /metrics (vllm:spec_decode_*)]") in outcome.stdout
    assert "tok/target pass: decode tokens over the target's forward passes" in outcome.stdout
