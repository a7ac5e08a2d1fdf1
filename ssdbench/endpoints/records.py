"""An endpoint's request as records: a `requests` row like any method's (so compare, report and the
gate pair it with methods and other endpoints), and an `endpoints` row with what only a server gives
(chunks, text, acceptance) or why the request failed.

TTFT is request start to the first chunk carrying output; decode time is that chunk to the stream's
end; new tokens are the server's count (usage) where it gives one, else the output ids' count.
Where the engine reports accepted drafts per verify step (vLLM's `detailed` per-request metrics), each
step also becomes a `steps` row, counted by the server (`steps.counted_by`), with no times of its own.
"""

from __future__ import annotations

from collections.abc import Callable

from ssdbench.decoding.recorder import Recorder, RequestKey
from ssdbench.endpoints.acceptance import Acceptance
from ssdbench.endpoints.wire.request import Completion

Tokenize = Callable[[str], list[int]]


def key_columns(recorder: Recorder, key: RequestKey) -> dict:
    return {"run_id": recorder.run_id, "method": key.method, "engine": key.engine, "suite": key.suite,
            "prompt_id": key.prompt_id, "request_idx": key.request_idx, "repeat": key.repeat}


def append(table: dict[str, list], row: dict) -> None:
    for name, value in row.items():
        table.setdefault(name, []).append(value)


def output_ids(completion: Completion, tokenize: Tokenize) -> tuple[list[int], str, list[int]]:
    """(output ids, their source, tokens per chunk): the server's ids where every chunk has them."""
    if completion.chunks and all(c.token_ids is not None for c in completion.chunks):
        per_chunk = [len(c.token_ids) for c in completion.chunks]
        return [t for c in completion.chunks for t in c.token_ids], "server", per_chunk
    per_chunk = [len(tokenize(c.text)) for c in completion.chunks]
    return tokenize(completion.text), "tokenizer", per_chunk


def record_success(recorder: Recorder, key: RequestKey, completion: Completion, *, prompt_ids: list[int], seed: int,
                   temperature: float, concurrency: int, url: str, t_start_ns: int, tokenize: Tokenize) -> None:
    ids, source, per_chunk = output_ids(completion, tokenize)
    usage = completion.usage or {}
    counted = usage.get("completion_tokens")
    new_tokens = int(counted) if isinstance(counted, int) else len(ids)
    decode_ms = (completion.end_ns - completion.first_token_ns) / 1e6
    per_token = decode_ms / (new_tokens - 1) if new_tokens > 1 and decode_ms > 0 else None
    acceptance = completion.acceptance
    rounds = record_server_rounds(recorder, key, acceptance)
    append(recorder.requests, {
        **key_columns(recorder, key), "batch_size": 1, "seed": seed, "temperature": temperature,
        "prompt_tokens": len(prompt_ids), "new_tokens": new_tokens,
        "ttft_ms": (completion.first_token_ns - completion.start_ns) / 1e6, "decode_ms": decode_ms,
        "tpot_ms": per_token, "decode_tokens_per_s": 1000.0 / per_token if per_token else None, "rounds": rounds,
        "finish_reason": "eos" if completion.finish_reason == "stop" else "length",
        "prompt_token_ids": list(prompt_ids), "output_token_ids": ids,
    })
    append(recorder.endpoints, {
        **key_columns(recorder, key), "concurrency": concurrency, "status": "ok", "error": None, "url": url,
        "model": completion.model, "model_asked": completion.model_asked,
        "t_start_ns": t_start_ns, "text": completion.text,
        "server_finish_reason": completion.finish_reason, "token_source": source,
        "completion_tokens": int(counted) if isinstance(counted, int) else None,
        "server_prompt_tokens": completion.server_prompt_tokens,
        "cached_prompt_tokens": completion.cached_prompt_tokens,
        "chunk_offsets_ms": [(c.t_ns - completion.start_ns) / 1e6 for c in completion.chunks],
        "chunk_tokens": per_chunk,
        "acceptance_source": acceptance and acceptance.source,
        "draft_tokens": acceptance and acceptance.draft_tokens,
        "accepted_tokens": acceptance and acceptance.accepted_tokens,
        "verify_steps": acceptance and acceptance.verify_steps,
        "acceptance_length": acceptance and acceptance.acceptance_length,
        "accepted_per_step": list(acceptance.accepted_per_step) if acceptance and acceptance.accepted_per_step
        else None,
        "accepted_per_position": list(acceptance.accepted_per_position)
        if acceptance and acceptance.accepted_per_position else None,
        "acceptance_note": completion.acceptance_note,
        "acceptance_invalid": acceptance and acceptance.invalid,
        "target_passes": target_passes(int(counted) if isinstance(counted, int) else None, acceptance),
        "text_matches_ar": None,  # filled once the run's ar outputs are known (`text_identity`)
    })


def target_passes(completion_tokens: int | None, acceptance: Acceptance | None) -> int | None:
    """Target forward passes behind the request's tokens, prefill included: each pass commits one token of its own
    beside the drafts it accepted, so passes = completion tokens - accepted drafts. No engine reports the passes
    themselves (vLLM's num_spec_steps counts only the steps that drafted); None where the accepted count is not
    known or cannot be the request's (more accepted drafts than tokens)."""
    if completion_tokens is None or acceptance is None or acceptance.invalid or acceptance.accepted_tokens is None:
        return None
    passes = completion_tokens - acceptance.accepted_tokens
    return passes if passes >= 1 else None


def record_server_rounds(recorder: Recorder, key: RequestKey, acceptance: Acceptance | None) -> int:
    """The request's verify steps as `steps` rows where the engine counted them one by one; how many
    (0 where it gave no per-step counts: the request's `rounds` are then unknown, and no rows are made up)."""
    if acceptance is None or not acceptance.accepted_per_step:
        return 0
    recorder.add_server_rounds(key, list(acceptance.accepted_per_step),
                               list(acceptance.drafted_per_step) if acceptance.drafted_per_step else None,
                               source=acceptance.source)
    return len(acceptance.accepted_per_step)


def record_failure(recorder: Recorder, key: RequestKey, *, error: str, concurrency: int, url: str,
                   t_start_ns: int) -> None:
    nulls = dict.fromkeys(("model", "model_asked", "text", "server_finish_reason", "token_source", "completion_tokens",
                           "server_prompt_tokens", "cached_prompt_tokens", "target_passes", "text_matches_ar",
                           "chunk_offsets_ms", "chunk_tokens", "acceptance_source", "draft_tokens", "accepted_tokens",
                           "verify_steps", "acceptance_length", "accepted_per_step",
                           "accepted_per_position", "acceptance_note", "acceptance_invalid"))
    append(recorder.endpoints, {**key_columns(recorder, key), "concurrency": concurrency, "status": "failed",
                                "error": error, "url": url, "t_start_ns": t_start_ns, **nulls})
