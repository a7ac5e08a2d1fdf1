"""An OpenAI completions or chat completions body, checked field by field into a ServeRequest.

Every refusal is an ApiError carrying the HTTP status and the field it names, answered as OpenAI's
error JSON (openai_response.error_body). Fields this server does not implement are refused rather
than ignored where ignoring them would change the answer (n > 1, logprobs, best_of, echo), and
passed over where they would not (user, presence_penalty 0, ...).
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from ssdbench.sampling.params import SamplingParams

MAX_STOP_STRINGS = 4  # OpenAI's limit
REFUSED_IF_SET = {"logprobs": (None, False, 0), "best_of": (None, 1), "echo": (None, False), "suffix": (None, ""),
                  "top_logprobs": (None, 0), "tools": (None, []), "logit_bias": (None, {})}


class ApiError(Exception):
    """A request refused with an HTTP status; `param` names the field at fault, where one is."""

    def __init__(self, status: int, message: str, *, param: str | None = None, kind: str = "invalid_request_error"):
        super().__init__(message)
        self.status, self.message, self.param, self.kind = status, message, param, kind


@dataclass(frozen=True)
class Defaults:
    """What a request gets for a field it leaves out: the server's own options."""

    model: str
    max_tokens: int
    temperature: float
    top_p: float
    context_positions: int  # prompt + new tokens + the method's draft slack must fit
    slack: int  # positions a method writes past prompt + new tokens (its drafts)
    greedy_only: bool = False


@dataclass(frozen=True)
class ServeRequest:
    request_id: str
    chat: bool
    prompt_ids: tuple[int, ...]
    max_tokens: int
    sampling: SamplingParams
    seed: int | None
    stop: tuple[str, ...]
    ignore_eos: bool
    stream: bool
    include_usage: bool
    model: str
    created: int = field(default_factory=lambda: int(time.time()))


def parse_request(body: object, *, chat: bool, defaults: Defaults,
                  tokenize: Callable[[str], list[int]], template: Callable[[list[dict]], list[int]],
                  vocab_size: int) -> ServeRequest:
    """The body's request, or ApiError (400 for a bad field, 404 for an unknown model)."""
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    model = body.get("model", defaults.model)
    if model != defaults.model:
        raise ApiError(404, f"the model '{model}' does not exist; this server serves '{defaults.model}'",
                       param="model", kind="not_found_error")
    _refuse_unsupported(body)
    prompt_ids = _chat_prompt(body, template) if chat else _prompt(body, tokenize, vocab_size)
    max_tokens = _max_tokens(body, defaults)
    _check_fits(len(prompt_ids), max_tokens, defaults)
    sampling = _sampling(body, defaults)
    stream_options = _optional(body, "stream_options", dict) or {}
    return ServeRequest(
        request_id=("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex, chat=chat, prompt_ids=tuple(prompt_ids),
        max_tokens=max_tokens, sampling=sampling, seed=_optional_int(body, "seed"), stop=_stop(body),
        ignore_eos=bool(_optional(body, "ignore_eos", bool)), stream=bool(_optional(body, "stream", bool)),
        include_usage=bool(stream_options.get("include_usage")), model=defaults.model)


def _refuse_unsupported(body: dict) -> None:
    n = body.get("n", 1)
    if n != 1:
        raise ApiError(400, f"n must be 1 on this server, got {n!r}", param="n")
    for name, harmless in REFUSED_IF_SET.items():
        if name in body and body[name] not in harmless:
            raise ApiError(400, f"'{name}' is not supported by this server", param=name)


def _optional(body: dict, name: str, kind: type):
    value = body.get(name)
    if value is not None and (not isinstance(value, kind) or (kind is not bool and isinstance(value, bool))):
        raise ApiError(400, f"'{name}' must be a {kind.__name__}, got {type(value).__name__}", param=name)
    return value


def _optional_int(body: dict, name: str) -> int | None:
    return _optional(body, name, int)


def _optional_number(body: dict, name: str) -> float | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ApiError(400, f"'{name}' must be a finite number, got {value!r}", param=name)
    return float(value)


def _prompt(body: dict, tokenize: Callable[[str], list[int]], vocab_size: int) -> list[int]:
    """`prompt` as text or as token ids (a list of ints, or a one-element list of either)."""
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]  # a batch of one prompt
    if isinstance(prompt, str):
        ids = tokenize(prompt)
    elif isinstance(prompt, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        bad = [t for t in prompt if not 0 <= t < vocab_size]
        if bad:
            raise ApiError(400, f"prompt token {bad[0]} is outside the vocabulary (0..{vocab_size - 1})",
                           param="prompt")
        ids = list(prompt)
    else:
        raise ApiError(400, "'prompt' must be a string or a list of token ids (one prompt per request)",
                       param="prompt")
    if not ids:
        raise ApiError(400, "the prompt is empty", param="prompt")
    return ids


def _chat_prompt(body: dict, template: Callable[[list[dict]], list[int]]) -> list[int]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "'messages' must be a non-empty list", param="messages")
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str) \
                or not isinstance(message.get("content"), str):
            raise ApiError(400, f"messages[{i}] must be an object with a string 'role' and 'content'",
                           param="messages")
    return template([{"role": m["role"], "content": m["content"]} for m in messages])


def _max_tokens(body: dict, defaults: Defaults) -> int:
    value = _optional_int(body, "max_completion_tokens")
    value = _optional_int(body, "max_tokens") if value is None else value
    if value is None:
        return defaults.max_tokens
    if value < 1:
        raise ApiError(400, f"'max_tokens' must be at least 1, got {value}", param="max_tokens")
    return value


def _check_fits(prompt_len: int, max_tokens: int, defaults: Defaults) -> None:
    needed = prompt_len + max_tokens + defaults.slack
    if needed > defaults.context_positions:
        raise ApiError(400, f"this model's context is {defaults.context_positions} positions; the request needs "
                            f"{needed} ({prompt_len} prompt + {max_tokens} max_tokens + {defaults.slack} for the "
                            "method's drafts)", param="max_tokens", kind="context_length_exceeded")


def _sampling(body: dict, defaults: Defaults) -> SamplingParams:
    temperature = _optional_number(body, "temperature")
    top_p = _optional_number(body, "top_p")
    temperature = defaults.temperature if temperature is None else temperature
    top_p = defaults.top_p if top_p is None else top_p
    if not 0 <= temperature <= 2:
        raise ApiError(400, f"'temperature' must be from 0 to 2, got {temperature:g}", param="temperature")
    if not 0 < top_p <= 1:
        raise ApiError(400, f"'top_p' must be in (0, 1], got {top_p:g}", param="top_p")
    if defaults.greedy_only and temperature != 0:
        raise ApiError(400, "this server was started with --greedy-only: temperature must be 0",
                       param="temperature")
    return SamplingParams(temperature=temperature, top_p=top_p)


def _stop(body: dict) -> tuple[str, ...]:
    stop = body.get("stop")
    if stop is None:
        return ()
    stops = [stop] if isinstance(stop, str) else stop
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops) \
            or len(stops) > MAX_STOP_STRINGS:
        raise ApiError(400, f"'stop' must be a non-empty string or a list of at most {MAX_STOP_STRINGS} of them",
                       param="stop")
    return tuple(stops)
