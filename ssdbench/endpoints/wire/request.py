"""One streamed completion, timed on its own: every chunk's arrival, its text and token ids (where the
server sends them), the finish reason, the usage and the request's acceptance.

Two APIs (`--endpoint-api`):
- `completions` (`/v1/completions`): the prompt goes as token ids (`prompt: [ids]`, which
  OpenAI-compatible completions endpoints take), so an endpoint reads exactly the tokens the methods
  read: the same chat template, the same BOS.
- `chat` (`/v1/chat/completions`): the prompt goes as the same messages the methods' ids were
  templated from (`suites.chat.chat_messages`), and the server applies its own chat template; its
  `usage.prompt_tokens` says whether it came to the same number of tokens. Deltas' `content` is the text.
Both stream with `stream_options.include_usage`. Times are `perf_counter_ns`; the request starts just
before it is sent. What the engine's own fields say of speculation is not read here: the caller passes
`read_acceptance` (`consistency.request_acceptance`: every engine's shapes, checked), which gets every
event the stream sent once it has ended.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ssdbench.endpoints.acceptance import Acceptance
from ssdbench.endpoints.wire import sse
from ssdbench.endpoints.wire.fields import (MalformedAnswer, as_object, count_or_none, optional_list,
                                            optional_object, optional_text, token_ids)
from ssdbench.endpoints.wire.http import RequestFailed, open_connection, send

COMPLETIONS_PATH = "/v1/completions"
CHAT_PATH = "/v1/chat/completions"
ReadAcceptance = Callable[[list[dict]], "Acceptance | None"]  # every event of a stream -> its acceptance


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
    model: str | None = None  # the name the answers gave: the first unlike `model_asked` where one differs
    model_asked: str | None = None
    acceptance: Acceptance | None = None
    acceptance_note: str | None = None  # why /metrics counters were not used, where they were refused

    @property
    def text(self) -> str:
        return "".join(c.text for c in self.chunks)

    @property
    def first_token_ns(self) -> int:
        return self.chunks[0].t_ns if self.chunks else self.end_ns

    @property
    def server_prompt_tokens(self) -> int | None:
        """The prompt's length as the server counted it (usage), where it says."""
        value = (self.usage or {}).get("prompt_tokens")
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    @property
    def cached_prompt_tokens(self) -> int | None:
        """Prompt tokens the server took from its prefix cache (usage.prompt_tokens_details.cached_tokens, as vLLM
        and llama-server report them), where it says; checked as a count when the event was read."""
        details = (self.usage or {}).get("prompt_tokens_details") or {}
        return count_or_none(details.get("cached_tokens"), "usage.prompt_tokens_details.cached_tokens")


def _sampling_fields(sampling: Sampling) -> dict:
    fields = {"max_tokens": sampling.max_new_tokens, "temperature": sampling.temperature, "top_p": sampling.top_p,
              "seed": sampling.seed, "stream": True, "stream_options": {"include_usage": True}}
    if sampling.ignore_eos:
        fields["ignore_eos"] = True
    return fields


def request_body(model: str, prompt_ids: list[int], sampling: Sampling, extra: dict) -> dict:
    return {"model": model, "prompt": list(prompt_ids), **_sampling_fields(sampling), **extra}


def chat_request_body(model: str, messages: list[dict], sampling: Sampling, extra: dict) -> dict:
    return {"model": model, "messages": list(messages), **_sampling_fields(sampling), **extra}


def stream_completion(url: str, model: str, prompt_ids: list[int], sampling: Sampling, *, timeout_s: float,
                      read_acceptance: ReadAcceptance, api_key: str | None = None,
                      extra: dict | None = None) -> Completion:
    """The whole streamed answer, or RequestFailed (refused, timed out, HTTP error, broken stream)."""
    body = request_body(model, prompt_ids, sampling, extra or {})
    return stream(url, COMPLETIONS_PATH, body, timeout_s=timeout_s, api_key=api_key, read_acceptance=read_acceptance)


def stream_chat(url: str, model: str, messages: list[dict], sampling: Sampling, *, timeout_s: float,
                read_acceptance: ReadAcceptance, api_key: str | None = None, extra: dict | None = None) -> Completion:
    """The whole streamed chat answer (the server templates `messages`), or RequestFailed."""
    body = chat_request_body(model, messages, sampling, extra or {})
    return stream(url, CHAT_PATH, body, timeout_s=timeout_s, api_key=api_key, read_acceptance=read_acceptance)


def stream(url: str, path: str, body: dict, *, timeout_s: float, api_key: str | None,
           read_acceptance: ReadAcceptance) -> Completion:
    conn = open_connection(url, timeout_s=timeout_s)
    start_ns = time.perf_counter_ns()
    deadline_ns = start_ns + int(timeout_s * 1e9)
    try:
        response = send(conn, "POST", url, path, body=body, api_key=api_key, streaming=True)
        completion = Completion(start_ns=start_ns, end_ns=start_ns, model_asked=body.get("model"))
        seen: list[dict] = []
        for t_ns, event in sse.events(response, url, deadline_ns=deadline_ns):
            try:
                _take_event(completion, event, t_ns)
            except MalformedAnswer as err:
                raise MalformedAnswer(f"{url}{path}: {err}") from None
            seen.append(event)
        completion.end_ns = time.perf_counter_ns()
    finally:
        conn.close()
    completion.acceptance = read_acceptance(seen)
    if completion.finish_reason is None:
        raise RequestFailed(f"{url} ended its stream without a finish reason")
    return completion


def _take_event(completion: Completion, event: dict, t_ns: int) -> None:
    """One event's fields, each checked as it is read: a wrong shape fails the request (MalformedAnswer)."""
    named = optional_text(event.get("model"), "model")
    if named and completion.model in (None, completion.model_asked):  # a name unlike the asked one is kept
        completion.model = named
    usage = optional_object(event.get("usage"), "usage")
    if usage is not None:
        for name in ("prompt_tokens", "completion_tokens"):
            count_or_none(usage.get(name), f"usage.{name}")
        details = optional_object(usage.get("prompt_tokens_details"), "usage.prompt_tokens_details") or {}
        count_or_none(details.get("cached_tokens"), "usage.prompt_tokens_details.cached_tokens")
        completion.usage = usage
    for n, choice in enumerate(optional_list(event.get("choices"), "choices") or ()):
        _take_choice(completion, as_object(choice, f"choices[{n}]"), f"choices[{n}]", t_ns)


def _take_choice(completion: Completion, choice: dict, where: str, t_ns: int) -> None:
    text = optional_text(choice.get("text"), f"{where}.text")
    if text is None:  # chat completions stream deltas
        delta = optional_object(choice.get("delta"), f"{where}.delta") or {}
        text = optional_text(delta.get("content"), f"{where}.delta.content")
    ids = token_ids(choice.get("token_ids"), f"{where}.token_ids")
    if text or ids:
        completion.chunks.append(Chunk(t_ns, text or "", ids or None))
    reason = optional_text(choice.get("finish_reason"), f"{where}.finish_reason")
    if reason:
        completion.finish_reason = reason
