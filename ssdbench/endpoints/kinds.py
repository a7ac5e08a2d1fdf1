"""The serving engines ssdbench understands, for `ssdbench ls` and for the request fields that ask
each of them for per-request speculation figures."""

from __future__ import annotations

from dataclasses import dataclass, field

from ssdbench.endpoints import acceptance


@dataclass(frozen=True)
class EndpointKind:
    name: str
    owned_by: tuple[str, ...]  # what the server puts in /v1/models `owned_by`
    acceptance: str  # where its per-request acceptance comes from
    request_fields: dict = field(default_factory=dict)  # added to every completion request
    note: str = ""


KINDS: tuple[EndpointKind, ...] = (
    EndpointKind("llama.cpp", ("llamacpp",), acceptance.LLAMA_CPP, {"cache_prompt": False},
                 "an acceptance rate (draft_n_accepted / draft_n); started with --metrics, verify steps and the "
                 "acceptance length come from /metrics (llamacpp:spec_decode_*) at concurrency 1. Prompt caching "
                 "is turned off per request, so every request prefills, as the methods do."),
    EndpointKind("vllm", ("vllm",), acceptance.VLLM, {},
                 "start the server with --per-request-spec-decode-metrics summary (detailed: per-step counts); "
                 "without it, /metrics (vllm:spec_decode_*) at concurrency 1"),
    EndpointKind("sglang", ("sglang",), acceptance.SGLANG_EXT, {"return_spec_tokens_details": True},
                 "asked per request with return_spec_tokens_details"),
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
