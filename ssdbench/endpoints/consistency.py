"""Whether a request's speculation figures can be true together, checked before anything uses them.

An engine's figures (or the counters' difference) that contradict one another are recorded as invalid,
with the reason, and never printed as measured: accepted within drafted, no drafts without verify steps,
per-step counts as many as the steps and summing to the totals, a finite acceptance length of at least one
token per step, per-position counts summing to the accepted ones; and what the engine whose shape it is
holds its own figures to (`Engine.figure_checks`: vLLM's mean length is 1 + accepted / steps).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from ssdbench.endpoints.acceptance import Acceptance
from ssdbench.endpoints.engines.registry import detect, engine_reading


def request_acceptance(events: Iterable[dict]) -> Acceptance | None:
    """A streamed request's acceptance from the events it sent (any engine's shape), checked."""
    return checked(detect(events))


def checked(reading: Acceptance | None) -> Acceptance | None:
    """The reading as it is, or an invalid one naming every contradiction; None stays None."""
    if reading is None or reading.invalid is not None:
        return reading
    problems = contradictions(reading)
    return Acceptance(reading.source, invalid="; ".join(problems)) if problems else reading


def contradictions(a: Acceptance) -> list[str]:
    return [p for check in (_signs, _totals, _per_step, _length, _per_position) for p in check(a)]


def _signs(a: Acceptance) -> list[str]:
    named = {"drafted tokens": a.draft_tokens, "accepted tokens": a.accepted_tokens, "verify steps": a.verify_steps}
    lists = {"per-step accepted": a.accepted_per_step, "per-step drafted": a.drafted_per_step,
             "per-position accepted": a.accepted_per_position}
    return ([f"{v} {name}" for name, v in named.items() if v is not None and v < 0]
            + [f"a negative {name} count" for name, v in lists.items() if v and min(v) < 0])


def _totals(a: Acceptance) -> list[str]:
    found = []
    if a.accepted_tokens is not None and a.draft_tokens is not None and a.accepted_tokens > a.draft_tokens:
        found.append(f"{a.accepted_tokens} accepted of {a.draft_tokens} drafted tokens")
    if a.verify_steps == 0 and a.draft_tokens:
        found.append(f"{a.draft_tokens} drafted tokens in 0 verify steps")
    return found


def _per_step(a: Acceptance) -> list[str]:
    accepted, drafted, found = a.accepted_per_step, a.drafted_per_step, []
    if accepted is not None and a.verify_steps is not None and len(accepted) != a.verify_steps:
        found.append(f"{len(accepted)} per-step accepted counts for {a.verify_steps} verify steps")
    if accepted is not None and a.accepted_tokens is not None and sum(accepted) != a.accepted_tokens:
        found.append(f"per-step accepted counts sum to {sum(accepted)}, not the {a.accepted_tokens} accepted")
    if drafted is not None and a.draft_tokens is not None and sum(drafted) != a.draft_tokens:
        found.append(f"per-step drafted counts sum to {sum(drafted)}, not the {a.draft_tokens} drafted")
    if accepted is not None and drafted is not None:
        if len(accepted) != len(drafted):
            found.append(f"{len(accepted)} per-step accepted counts but {len(drafted)} drafted")
        elif any(x > d for x, d in zip(accepted, drafted)):
            found.append("a step accepted more drafts than it drafted")
    return found


def _length(a: Acceptance) -> list[str]:
    length = a.acceptance_length
    if length is None or a.verify_steps == 0:
        return []
    if not math.isfinite(length) or length < 1:
        return [f"acceptance length {length:g} (a verify step emits at least 1 token)"]
    engine = engine_reading(a.source)
    return engine.figure_checks(a) if engine is not None and engine.figure_checks is not None else []


def _per_position(a: Acceptance) -> list[str]:
    per_position = a.accepted_per_position
    if per_position is None or a.accepted_tokens is None or sum(per_position) == a.accepted_tokens:
        return []
    return [f"per-position accepted counts sum to {sum(per_position)}, not the {a.accepted_tokens} accepted"]
