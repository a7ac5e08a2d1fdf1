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

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ssdbench.endpoints.fields import COUNT_MAX, describe, is_count

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
    invalid: str | None = None  # why the engine's figures cannot be true (then all of them are None)

    @property
    def rate(self) -> float | None:
        if self.draft_tokens and self.accepted_tokens is not None:
            return self.accepted_tokens / self.draft_tokens
        return None


class BadFigure(ValueError):
    """A speculation figure of the wrong type or range: the request stands, its figures are invalid."""


def _int(value, where: str) -> int | None:
    if value is None:
        return None
    if not is_count(value):
        raise BadFigure(f"{where}: expected a whole number from 0 to {COUNT_MAX}, got {describe(value)}")
    return int(value)


def _float(value, where: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise BadFigure(f"{where}: expected a finite number, got {describe(value)}")
    return float(value)


def _dict(value) -> dict:
    return value if isinstance(value, dict) else {}


def from_llama_cpp(event: dict) -> Acceptance | None:
    timings = _dict(event.get("timings"))
    if "draft_n" not in timings:
        return None
    return Acceptance(LLAMA_CPP, draft_tokens=_int(timings["draft_n"], "timings.draft_n"),
                      accepted_tokens=_int(timings.get("draft_n_accepted"), "timings.draft_n_accepted"))


def from_vllm(event: dict) -> Acceptance | None:
    spec = _dict(_dict(event.get("metrics")).get("speculative_decoding"))
    if not spec:
        return None
    where = "metrics.speculative_decoding."
    return Acceptance(VLLM, draft_tokens=_int(spec.get("num_draft_tokens"), where + "num_draft_tokens"),
                      accepted_tokens=_int(spec.get("num_accepted_draft_tokens"), where + "num_accepted_draft_tokens"),
                      verify_steps=_int(spec.get("num_spec_steps"), where + "num_spec_steps"),
                      acceptance_length=_float(spec.get("mean_acceptance_length"), where + "mean_acceptance_length"),
                      accepted_per_step=_counts(spec.get("per_step_accepted"), where + "per_step_accepted"),
                      drafted_per_step=_counts(spec.get("per_step_drafted"), where + "per_step_drafted"))


def _counts(value, where: str) -> tuple[int, ...] | None:
    """A per-step array of counts, or None where it is absent."""
    if value is None:
        return None
    if not isinstance(value, list):
        raise BadFigure(f"{where}: expected a list of counts, got {describe(value)}")
    for i, item in enumerate(value):
        if not is_count(item):
            raise BadFigure(f"{where}[{i}]: expected a whole number from 0 to {COUNT_MAX}, got {describe(item)}")
    return tuple(int(item) for item in value)


def _sglang(details: dict, source: str, where: str) -> Acceptance | None:
    if "spec_verify_ct" not in details:
        return None
    steps = _int(details["spec_verify_ct"], where + "spec_verify_ct")
    length = _float(details.get("spec_accept_length"), where + "spec_accept_length")
    return Acceptance(source, draft_tokens=_int(details.get("spec_num_proposed_drafts"),
                                                where + "spec_num_proposed_drafts"),
                      accepted_tokens=_int(details.get("spec_num_correct_drafts"), where + "spec_num_correct_drafts"),
                      verify_steps=steps, acceptance_length=length if steps else None)


def from_sglang_ext(event: dict) -> Acceptance | None:
    return _sglang(_dict(_dict(event.get("sglext")).get("spec_tokens_details")), SGLANG_EXT,
                   "sglext.spec_tokens_details.")


def from_sglang_meta(event: dict) -> Acceptance | None:
    return _sglang(_dict(event.get("meta_info")), SGLANG_META, "meta_info.")


def from_trtllm(event: dict) -> Acceptance | None:
    choices = event.get("choices")
    for n, choice in enumerate(choices if isinstance(choices, list) else ()):
        value = _dict(choice).get("avg_decoded_tokens_per_iter")
        if value is not None:
            return Acceptance(TRTLLM, acceptance_length=_float(value, f"choices[{n}].avg_decoded_tokens_per_iter"))
    return None


PARSERS: tuple[tuple[str, Callable[[dict], Acceptance | None]], ...] = (
    (VLLM, from_vllm), (SGLANG_EXT, from_sglang_ext), (SGLANG_META, from_sglang_meta), (TRTLLM, from_trtllm),
    (LLAMA_CPP, from_llama_cpp))


def read(event: dict) -> Acceptance | None:
    """The first engine's figures the event carries; a figure of the wrong type or range makes them invalid
    (the request stands). Whether they agree with one another is `consistency`'s to check."""
    for source, parse in PARSERS:
        try:
            reading = parse(event)
        except BadFigure as err:
            return Acceptance(source, invalid=str(err))
        if reading is not None:
            return reading
    return None


def detect(events: Iterable[dict]) -> Acceptance | None:
    """The request's acceptance: the last event that carries any engine's fields (they are totals
    for the request so far, so the last one is the whole request's)."""
    found = None
    for event in events:
        found = read(event) or found
    return found
