"""vLLM.

- Asked per request: `return_token_ids: true` (each chunk's `choices[i].token_ids`) and a fresh
  `cache_salt`, which keys its prefix cache apart from every other request's.
- Acceptance in a response (`--per-request-spec-decode-metrics summary|detailed`):
  `metrics.speculative_decoding` with `num_spec_steps`, `num_draft_tokens`, `num_accepted_draft_tokens`,
  `mean_acceptance_length`; `detailed` adds `per_step_accepted` and `per_step_drafted` (in a stream: on
  the final usage chunk). Its mean length is 1 + accepted / steps, which the checks hold it to.
- `/metrics`: `vllm:spec_decode_num_drafts`, `..._num_draft_tokens`, `..._num_accepted_tokens`,
  `..._num_accepted_tokens_per_pos{position="i"}` and `vllm:generation_tokens`, labelled with
  `model_name` and `engine`; its dtype in `vllm:model_config_info{dtype="bfloat16",...}` where the
  version exports that gauge (its `/v1/models` names no dtype; `torch.bfloat16` reads the same).
- `GET /version`: `version`.
"""

from __future__ import annotations

from ssdbench.endpoints.acceptance import Acceptance, count, counts, number, object_or_empty
from ssdbench.endpoints.counters import CounterNames
from ssdbench.endpoints.dtypes import text_or_none
from ssdbench.endpoints.engines.base import Engine
from ssdbench.endpoints.wire.prometheus import parse_samples

SOURCE = "vllm metrics.speculative_decoding"
COUNTERS = CounterNames("vllm:spec_decode_*", "vllm:generation_tokens", "vllm:spec_decode_num_draft_tokens",
                        "vllm:spec_decode_num_accepted_tokens", "vllm:spec_decode_num_drafts",
                        "vllm:spec_decode_num_accepted_tokens_per_pos")
LENGTH_TOLERANCE = 0.01  # it may round its mean acceptance length


def from_metrics(event: dict) -> Acceptance | None:
    spec = object_or_empty(object_or_empty(event.get("metrics")).get("speculative_decoding"))
    if not spec:
        return None
    where = "metrics.speculative_decoding."
    return Acceptance(SOURCE, draft_tokens=count(spec.get("num_draft_tokens"), where + "num_draft_tokens"),
                      accepted_tokens=count(spec.get("num_accepted_draft_tokens"), where + "num_accepted_draft_tokens"),
                      verify_steps=count(spec.get("num_spec_steps"), where + "num_spec_steps"),
                      acceptance_length=number(spec.get("mean_acceptance_length"), where + "mean_acceptance_length"),
                      accepted_per_step=counts(spec.get("per_step_accepted"), where + "per_step_accepted"),
                      drafted_per_step=counts(spec.get("per_step_drafted"), where + "per_step_drafted"))


def mean_length_check(a: Acceptance) -> list[str]:
    """Its mean acceptance length is 1 + accepted / steps: a length unlike that contradicts its counts."""
    if not a.verify_steps or a.accepted_tokens is None or a.acceptance_length is None:
        return []
    expected = 1 + a.accepted_tokens / a.verify_steps
    if abs(a.acceptance_length - expected) > LENGTH_TOLERANCE:
        return [f"mean acceptance length {a.acceptance_length:g} where {a.accepted_tokens} accepted in "
                f"{a.verify_steps} steps make {expected:.3g}"]
    return []


def dtype_of(version: object, metrics_text: str | None) -> str | None:
    if metrics_text is None:
        return None
    for sample in parse_samples(metrics_text):
        if sample.name == "vllm:model_config_info" and "dtype" in sample.labels:
            return text_or_none(sample.labels["dtype"])
    return None


ENGINE = Engine(
    "vllm", owned_by=("vllm",), acceptance_source=SOURCE,
    note="start the server with --per-request-spec-decode-metrics summary (detailed: per-step counts); "
         "without it, /metrics (vllm:spec_decode_*) at concurrency 1. Token ids are asked per request "
         "(return_token_ids) and each request has a cache_salt of its own (no prefix-cache hits).",
    readers=((SOURCE, from_metrics),), request_fields={"return_token_ids": True}, salts_prefix_cache=True,
    counters=COUNTERS, self_report_route="/version", version_key="version", dtype_of=dtype_of,
    figure_checks=mean_length_check, no_steps_note="vLLM's metrics.speculative_decoding gave no num_spec_steps",
)
