"""The serving engines ssdbench understands, for `ssdbench ls` and for the request fields that ask
each of them for per-request speculation figures, for the output token ids and for no prefix cache.

What each engine is asked, per request:
- llama.cpp: `cache_prompt: false` (no prompt cache). Its OpenAI-compatible routes send no token ids
  (`return_tokens` fills only the native `/completion`'s `tokens`), so its outputs are judged on text.
- vLLM: `return_token_ids: true` (each chunk's `choices[i].token_ids`) and a fresh `cache_salt` per
  request, which keys its prefix cache apart from every other request's.
- SGLang: `return_spec_tokens_details` and `return_token_ids`; that SGLang answers the latter with
  vLLM's `choices[i].token_ids` is assumed, untested here (where it does not, the text is judged). No
  per-request switch for its radix cache is known here: the warm-up's unmeasured prompt and the cached
  prompt tokens its usage reports (warned of where not 0) are what guard its measured requests.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from ssdbench.endpoints import acceptance


@dataclass(frozen=True)
class EndpointKind:
    name: str
    owned_by: tuple[str, ...]  # what the server puts in /v1/models `owned_by`
    acceptance: str  # where its per-request acceptance comes from
    request_fields: dict = field(default_factory=dict)  # added to every completion request
    note: str = ""
    salts_prefix_cache: bool = False  # a fresh `cache_salt` per request keeps its prefix cache from hitting

    def fields_for_request(self) -> dict:
        """The fields one request adds to its body: the kind's own, and a salt of its own where it takes one."""
        salt = {"cache_salt": uuid.uuid4().hex} if self.salts_prefix_cache else {}
        return {**self.request_fields, **salt}


KINDS: tuple[EndpointKind, ...] = (
    EndpointKind("llama.cpp", ("llamacpp",), acceptance.LLAMA_CPP, {"cache_prompt": False},
                 "an acceptance rate (draft_n_accepted / draft_n); started with --metrics, verify steps and the "
                 "acceptance length come from /metrics (llamacpp:spec_decode_*) at concurrency 1. Prompt caching "
                 "is turned off per request, so every request prefills, as the methods do."),
    EndpointKind("vllm", ("vllm",), acceptance.VLLM, {"return_token_ids": True},
                 "start the server with --per-request-spec-decode-metrics summary (detailed: per-step counts); "
                 "without it, /metrics (vllm:spec_decode_*) at concurrency 1. Token ids are asked per request "
                 "(return_token_ids) and each request has a cache_salt of its own (no prefix-cache hits).",
                 salts_prefix_cache=True),
    EndpointKind("sglang", ("sglang",), acceptance.SGLANG_EXT,
                 {"return_spec_tokens_details": True, "return_token_ids": True},
                 "asked per request with return_spec_tokens_details (and return_token_ids)"),
    EndpointKind("tensorrt-llm", ("tensorrt_llm", "trtllm", "tensorrt-llm"), acceptance.TRTLLM, {},
                 "tokens per decoding iteration (an acceptance length)"),
    EndpointKind("openai-compatible", (), "none", {},
                 "any other server: timings and outputs; acceptance where a response carries a known shape"),
)
BY_NAME = {k.name: k for k in KINDS}


def kind_of(owned_by: str) -> str:
    owner = owned_by.strip().lower()
    for kind in KINDS:
        if owner in kind.owned_by:
            return kind.name
    return "openai-compatible"
