"""A request's speculation figures, and the checked reading of the fields that carry them.

What a response carries is each engine's to say: every engine's file in `engines/` reads its own
shapes into an `Acceptance` with the helpers here, and `engines/registry.py:detect` finds which shape a
response carries (from the response itself, never assumed from a version), with the source recorded.
A figure of the wrong type or range raises `BadFigure`: the request stands, its figures are invalid.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ssdbench.endpoints.wire.fields import COUNT_MAX, describe, is_count


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


def count(value, where: str) -> int | None:
    """A count as an int, None where absent; BadFigure where it is no whole number in [0, COUNT_MAX]."""
    if value is None:
        return None
    if not is_count(value):
        raise BadFigure(f"{where}: expected a whole number from 0 to {COUNT_MAX}, got {describe(value)}")
    return int(value)


def number(value, where: str) -> float | None:
    """A finite number as a float, None where absent; BadFigure otherwise."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise BadFigure(f"{where}: expected a finite number, got {describe(value)}")
    return float(value)


def counts(value, where: str) -> tuple[int, ...] | None:
    """A per-step array of counts, or None where it is absent."""
    if value is None:
        return None
    if not isinstance(value, list):
        raise BadFigure(f"{where}: expected a list of counts, got {describe(value)}")
    for i, item in enumerate(value):
        if not is_count(item):
            raise BadFigure(f"{where}[{i}]: expected a whole number from 0 to {COUNT_MAX}, got {describe(item)}")
    return tuple(int(item) for item in value)


def object_or_empty(value) -> dict:
    """The value where it is a JSON object, else {}: a response without the engine's fields reads as none."""
    return value if isinstance(value, dict) else {}
