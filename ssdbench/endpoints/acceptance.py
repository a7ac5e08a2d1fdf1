"""Per-request speculation figures, read from what each engine returns; detected from the response
itself (never assumed from a version), with the source recorded.

Each parser takes one JSON object the server sent (a stream event or a whole response) and returns
an `Acceptance`, or None when the object does not carry its engine's fields. Shapes:

- llama.cpp `llama-server`: `timings.draft_n`, `timings.draft_n_accepted` (only when a draft ran).
  A rate: the response counts no verify steps, so no acceptance length is made up here (with
  `--metrics`, `counter_acceptance` adds them from the server's counters).
- vLLM (`--per-request-spec-decode-metrics summary|detailed`): `metrics.speculative_decoding` with
  `num_spec_steps`, `num_draft_tokens`, `num_accepted_draft_tokens`, `mean_acceptance_length`;
  `detailed` adds `per_step_accepted` and `per_step_drafted` (in a stream: on the final usage chunk).
- SGLang: `sglext.spec_tokens_details` (OpenAI endpoints, `return_spec_tokens_details`) with
  `spec_verify_ct`, `spec_num_proposed_drafts`, `spec_num_correct_drafts`, `spec_accept_length`;
  on `/generate`, the same names in `meta_info`.
- TensorRT-LLM: `avg_decoded_tokens_per_iter` on a choice: tokens per decoding iteration, i.e.
  the acceptance length (target token included).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

LLAMA_CPP = "llama.cpp timings.draft_n"
VLLM = "vllm metrics.speculative_decoding"
SGLANG_EXT = "sglang sglext.spec_tokens_details"
SGLANG_META = "sglang meta_info"
TRTLLM = "tensorrt-llm avg_decoded_tokens_per_iter"


@dataclass(frozen=True)
class Acceptance:
    source: str
    draft_tokens: int | None = None  # tokens the draft proposed over the request
    accepted_tokens: int | None = None  # of those, accepted
    verify_steps: int | None = None  # target verify steps; None where the engine does not count them
    acceptance_length: float | None = None  # tokens per verify step, bonus included; None where unknown
    accepted_per_step: tuple[int, ...] | None = None  # per verify step, where the engine gives it
    accepted_per_position: tuple[int, ...] | None = None  # accepted at draft position i, summed over steps
    drafted_per_step: tuple[int, ...] | None = None  # drafts proposed per verify step, where the engine gives it

    @property
    def rate(self) -> float | None:
        if self.draft_tokens and self.accepted_tokens is not None:
            return self.accepted_tokens / self.draft_tokens
        return None


def _int(value) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _float(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _dict(value) -> dict:
    return value if isinstance(value, dict) else {}


def from_llama_cpp(event: dict) -> Acceptance | None:
    timings = _dict(event.get("timings"))
    if "draft_n" not in timings:
        return None
    return Acceptance(LLAMA_CPP, draft_tokens=_int(timings["draft_n"]),
                      accepted_tokens=_int(timings.get("draft_n_accepted")))


def from_vllm(event: dict) -> Acceptance | None:
    spec = _dict(_dict(event.get("metrics")).get("speculative_decoding"))
    if not spec:
        return None
    return Acceptance(VLLM, draft_tokens=_int(spec.get("num_draft_tokens")),
                      accepted_tokens=_int(spec.get("num_accepted_draft_tokens")),
                      verify_steps=_int(spec.get("num_spec_steps")),
                      acceptance_length=_float(spec.get("mean_acceptance_length")),
                      accepted_per_step=_counts(spec.get("per_step_accepted")),
                      drafted_per_step=_counts(spec.get("per_step_drafted")))


def _counts(value) -> tuple[int, ...] | None:
    """A per-step array of non-negative whole counts, or None where it is absent or not one."""
    if not isinstance(value, list) or not all(_int(v) is not None and v >= 0 and v == int(v) for v in value):
        return None
    return tuple(int(v) for v in value)


def _sglang(details: dict, source: str) -> Acceptance | None:
    if "spec_verify_ct" not in details:
        return None
    steps = _int(details["spec_verify_ct"])
    length = _float(details.get("spec_accept_length"))
    return Acceptance(source, draft_tokens=_int(details.get("spec_num_proposed_drafts")),
                      accepted_tokens=_int(details.get("spec_num_correct_drafts")), verify_steps=steps,
                      acceptance_length=length if steps else None)


def from_sglang_ext(event: dict) -> Acceptance | None:
    return _sglang(_dict(_dict(event.get("sglext")).get("spec_tokens_details")), SGLANG_EXT)


def from_sglang_meta(event: dict) -> Acceptance | None:
    return _sglang(_dict(event.get("meta_info")), SGLANG_META)


def from_trtllm(event: dict) -> Acceptance | None:
    for choice in event.get("choices") or ():
        value = _float(_dict(choice).get("avg_decoded_tokens_per_iter"))
        if value is not None:
            return Acceptance(TRTLLM, acceptance_length=value)
    return None


PARSERS: tuple[Callable[[dict], Acceptance | None], ...] = (
    from_vllm, from_sglang_ext, from_sglang_meta, from_trtllm, from_llama_cpp)


def detect(events: Iterable[dict]) -> Acceptance | None:
    """The request's acceptance: the last event that carries any engine's fields (they are totals
    for the request so far, so the last one is the whole request's)."""
    found = None
    for event in events:
        for parse in PARSERS:
            reading = parse(event)
            if reading is not None:
                found = reading
                break
    return found
