"""One streamed completion, timed on its own: every chunk's arrival, its text and token ids (where the
server sends them), the finish reason, the usage and the request's acceptance.

The prompt goes as token ids (`prompt: [ids]`, which OpenAI-compatible completions endpoints take), so
an endpoint reads exactly the tokens the methods read: the same chat template, the same BOS.
Times are `perf_counter_ns`; the request starts just before it is sent.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from ssdbench.endpoints import sse
from ssdbench.endpoints.acceptance import Acceptance, detect
from ssdbench.endpoints.http import RequestFailed, open_connection, send

COMPLETIONS_PATH = "/v1/completions"


@dataclass(frozen=True)
class Sampling:
    max_new_tokens: int
    temperature: float
    top_p: float
    seed: int
    ignore_eos: bool = False


@dataclass(frozen=True)
class Chunk:
    t_ns: int
    text: str
    token_ids: tuple[int, ...] | None  # None: the server sent none (tokenised from the text later)


@dataclass
class Completion:
    start_ns: int
    end_ns: int
    chunks: list[Chunk] = field(default_factory=list)  # chunks that carry output (text or ids)
    finish_reason: str | None = None
    usage: dict | None = None
    model: str | None = None
    acceptance: Acceptance | None = None
    acceptance_note: str | None = None  # why /metrics counters were not used, where they were refused

    @property
    def text(self) -> str:
        return "".join(c.text for c in self.chunks)

    @property
    def first_token_ns(self) -> int:
        return self.chunks[0].t_ns if self.chunks else self.end_ns


def request_body(model: str, prompt_ids: list[int], sampling: Sampling, extra: dict) -> dict:
    body = {"model": model, "prompt": list(prompt_ids), "max_tokens": sampling.max_new_tokens,
            "temperature": sampling.temperature, "top_p": sampling.top_p, "seed": sampling.seed, "stream": True,
            "stream_options": {"include_usage": True}, **extra}
    if sampling.ignore_eos:
        body["ignore_eos"] = True
    return body


def stream_completion(url: str, model: str, prompt_ids: list[int], sampling: Sampling, *, timeout_s: float,
                      api_key: str | None = None, extra: dict | None = None) -> Completion:
    """The whole streamed answer, or RequestFailed (refused, timed out, HTTP error, broken stream)."""
    body = request_body(model, prompt_ids, sampling, extra or {})
    conn = open_connection(url, timeout_s=timeout_s)
    start_ns = time.perf_counter_ns()
    deadline_ns = start_ns + int(timeout_s * 1e9)
    try:
        response = send(conn, "POST", url, COMPLETIONS_PATH, body=body, api_key=api_key, streaming=True)
        completion = Completion(start_ns=start_ns, end_ns=start_ns)
        seen: list[dict] = []
        for t_ns, event in sse.events(response, url, deadline_ns=deadline_ns):
            _take_event(completion, event, t_ns)
            seen.append(event)
        completion.end_ns = time.perf_counter_ns()
    finally:
        conn.close()
    completion.acceptance = detect(seen)
    if completion.finish_reason is None:
        raise RequestFailed(f"{url} ended its stream without a finish reason")
    return completion


def _take_event(completion: Completion, event: dict, t_ns: int) -> None:
    completion.model = event.get("model") or completion.model
    if isinstance(event.get("usage"), dict):
        completion.usage = event["usage"]
    for choice in event.get("choices") or ():
        if not isinstance(choice, dict):
            raise RequestFailed(f"a chunk's choice is not an object: {choice!r:.80}")
        text = choice.get("text")
        if text is None:  # chat completions stream deltas
            text = (choice.get("delta") or {}).get("content")
        ids = choice.get("token_ids")
        if text or ids:
            completion.chunks.append(Chunk(t_ns, text or "", tuple(int(i) for i in ids) if ids else None))
        if choice.get("finish_reason"):
            completion.finish_reason = str(choice["finish_reason"])
