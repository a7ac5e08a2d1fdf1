"""A request's acceptance from the server-wide `/metrics` counters read just before and just after it,
and how that reading joins the one the response itself carried.

The rule, kept simple:
- per-request fields come first; a response whose reading counts verify steps (vLLM, SGLang) is
  taken as it is;
- the counters are read only at concurrency 1 (`runner`), and their difference is taken as this
  request's only when the generated-token counter moved by exactly the request's own completion
  tokens; otherwise it is refused, and why goes in the row's `acceptance_note`;
- a response with no figures gets the counters' reading alone; a response with a rate but no verify
  steps (llama-server's `timings.draft_n`) gets the counters' verify steps, acceptance length and
  per-position counts added, when the counters' draft and accepted counts equal its own; the source
  then names both.
"""

from __future__ import annotations

from dataclasses import replace

from ssdbench.endpoints.acceptance import Acceptance
from ssdbench.endpoints.consistency import contradictions
from ssdbench.endpoints.counters import CounterNames, SpecCounters


EXACT_BELOW = 2.0**53  # a double holds every whole number below this; past it, a difference may be off


def counted(before: SpecCounters, after: SpecCounters,
            completion_tokens: int | None) -> tuple[Acceptance | None, str | None]:
    """(the request's acceptance from the counters, or None; why none was taken, or None).

    No speculation in the request (draft counters unmoved) is (None, None): nothing to record."""
    names = after.names
    if completion_tokens is None:
        return None, f"{_counters(names)} not used: the server counted no completion tokens to check them against"
    problem = _unusable(before, after)
    if problem is not None:
        return None, f"{_counters(names)} refused: {problem}"
    generated = round(after.generated - before.generated)
    if generated > completion_tokens:
        return None, (f"{_counters(names)} refused: other traffic moved the counters ({generated} tokens generated "
                      f"on the server during this request's {completion_tokens})")
    if generated < completion_tokens:
        return None, (f"{_counters(names)} refused: the counters had counted {generated} of this request's "
                      f"{completion_tokens} tokens when read")
    drafted, accepted, steps = (round(after.draft_tokens - before.draft_tokens),
                                round(after.accepted - before.accepted), round(after.drafts - before.drafts))
    if drafted == 0 and steps == 0:
        return None, None
    reading = Acceptance(names.source, draft_tokens=drafted, accepted_tokens=accepted, verify_steps=steps,
                         acceptance_length=(accepted + steps) / steps if steps else None,
                         accepted_per_position=_position_difference(before, after))
    problems = contradictions(reading)
    if problems:
        return None, f"{_counters(names)} refused: " + "; ".join(problems)
    return reading, None


def _counters(names: CounterNames) -> str:
    """How a note names the counters: the route and the engine's family (`/metrics (vllm:spec_decode_*)`)."""
    return f"/metrics ({names.family})"


def _unusable(before: SpecCounters, after: SpecCounters) -> str | None:
    """Why the two readings give no difference to trust: values that are no counts, values past where the
    server (or a double) keeps them exact, or a counter that went down (a restart, a reset)."""
    if before.problem or after.problem:
        return before.problem or after.problem
    exact_below = min(after.names.exact_below, EXACT_BELOW)
    if max(after.totals.values()) >= exact_below:
        return f"its counters passed {exact_below:.0e}, where the server rounds them"
    earlier = before.per_position + (0.0,) * (len(after.per_position) - len(before.per_position))
    named = [*zip(after.totals, before.totals.values(), after.totals.values()),
             *((f"{after.names.per_position}[{i}]", b, a) for i, (b, a) in enumerate(zip(earlier, after.per_position)))]
    for name, was, now in named:
        if now < was:
            return f"{name} went down from {was:g} to {now:g} (the server restarted or reset its counters)"
    return None


def _position_difference(before: SpecCounters, after: SpecCounters) -> tuple[int, ...] | None:
    if not after.per_position:
        return None
    earlier = before.per_position + (0.0,) * (len(after.per_position) - len(before.per_position))
    return tuple(round(a - b) for a, b in zip(after.per_position, earlier))


def joined(own: Acceptance | None, from_counters: Acceptance | None,
           note: str | None) -> tuple[Acceptance | None, str | None]:
    """The request's acceptance as recorded, and a note where the counters were refused or disagreed."""
    if own is None:
        return from_counters, note
    if own.invalid is not None:  # the response's own figures stand as invalid: the counters do not mend them
        return own, note if from_counters is None else "/metrics not joined: the response's own figures are invalid"
    if own.verify_steps is not None or from_counters is None:
        return own, note if own.verify_steps is None else None
    if (own.draft_tokens, own.accepted_tokens) != (from_counters.draft_tokens, from_counters.accepted_tokens):
        return own, (f"/metrics not joined: its counters ({from_counters.draft_tokens} drafted, "
                     f"{from_counters.accepted_tokens} accepted) differ from the response's ({own.draft_tokens}, "
                     f"{own.accepted_tokens})")
    return replace(own, source=f"{own.source} + {from_counters.source}", verify_steps=from_counters.verify_steps,
                   acceptance_length=from_counters.acceptance_length,
                   accepted_per_position=from_counters.accepted_per_position), None
