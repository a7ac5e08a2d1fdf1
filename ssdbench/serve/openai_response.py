"""The server's answers in OpenAI's shapes: whole completions, stream chunks (SSE), usage, errors.

Every chunk that carries output also carries the tokens it came from (`choices[0].token_ids`, as vLLM
sends with `return_token_ids`), so a client compares outputs by ids, not re-tokenised text. The
request's speculation figures (spec_metrics.py) ride on the final chunk, or on the whole answer.
"""

from __future__ import annotations

import json

from ssdbench.serve.openai_request import ApiError, ServeRequest

OWNED_BY = "ssdbench"  # /v1/models `owned_by`: how a client tells this server from others


def error_body(err: ApiError) -> dict:
    return {"error": {"message": err.message, "type": err.kind, "param": err.param, "code": err.status}}


def models_body(model: str, created: int, max_model_len: int) -> dict:
    return {"object": "list", "data": [{"id": model, "object": "model", "created": created, "owned_by": OWNED_BY,
                                        "max_model_len": max_model_len}]}


def usage(prompt_tokens: int, completion_tokens: int) -> dict:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens, "prompt_tokens_details": {"cached_tokens": 0}}


def _choice(request: ServeRequest, text: str, token_ids: list[int] | tuple[int, ...], finish_reason: str | None,
            *, streamed: bool) -> dict:
    choice: dict = {"index": 0, "finish_reason": finish_reason, "token_ids": list(token_ids)}
    if not request.chat:
        choice["text"] = text
    elif streamed:
        choice["delta"] = {"content": text} if text else {}
    else:
        choice["message"] = {"role": "assistant", "content": text}
    return choice


def _envelope(request: ServeRequest, *, streamed: bool) -> dict:
    if request.chat:
        kind = "chat.completion.chunk" if streamed else "chat.completion"
    else:
        kind = "text_completion"
    return {"id": request.request_id, "object": kind, "created": request.created, "model": request.model}


def whole_answer(request: ServeRequest, text: str, token_ids: list[int], finish_reason: str,
                 prompt_tokens: int, metrics: dict | None) -> dict:
    body = {**_envelope(request, streamed=False),
            "choices": [_choice(request, text, token_ids, finish_reason, streamed=False)],
            "usage": usage(prompt_tokens, len(token_ids))}
    if metrics is not None:
        body["metrics"] = metrics
    return body


def role_chunk(request: ServeRequest) -> dict:
    """A chat stream's first chunk: the assistant's role, no content."""
    return {**_envelope(request, streamed=True),
            "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None,
                         "token_ids": []}]}


def delta_chunk(request: ServeRequest, text: str, token_ids: tuple[int, ...]) -> dict:
    return {**_envelope(request, streamed=True), "choices": [_choice(request, text, token_ids, None, streamed=True)]}


def final_chunks(request: ServeRequest, finish_reason: str, prompt_tokens: int, completion_tokens: int,
                 metrics: dict | None) -> list[dict]:
    """The chunk with the finish reason, then (with stream_options.include_usage) the usage chunk; the request's
    metrics go on the last of them."""
    finish = {**_envelope(request, streamed=True), "choices": [_choice(request, "", (), finish_reason, streamed=True)]}
    chunks = [finish]
    if request.include_usage:
        chunks.append({**_envelope(request, streamed=True), "choices": [],
                       "usage": usage(prompt_tokens, completion_tokens)})
    if metrics is not None:
        chunks[-1]["metrics"] = metrics
    return chunks


def sse(data: dict | str) -> bytes:
    payload = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    return f"data: {payload}\n\n".encode()


DONE = sse("[DONE]")
