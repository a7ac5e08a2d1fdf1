"""A server's speculation counters, read from its `/metrics` samples: the fallback for engines whose
responses carry no per-request acceptance (and the verify steps llama-server's responses lack).

An engine that exposes such counters names them in its declaration (`CounterNames`, in its file in
`engines/`); `engines/registry.py:counters_in` tries each engine's names in turn. The counters are
server-wide totals, so a request's figures are the difference between a reading before it and one after
it; `counter_acceptance` decides when that difference is this request's alone. Label sets are summed,
draft positions apart.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ssdbench.endpoints.wire.prometheus import Sample, matching, summed

MAX_POSITIONS = 256  # draft positions read: far beyond any engine's draft length, and a bound on what is allocated


@dataclass(frozen=True)
class CounterNames:
    """One engine's counter names, without the `_total` suffix a Prometheus client may add."""

    family: str  # recorded as the source, e.g. llamacpp:spec_decode_*
    generated: str  # generated tokens, all requests: moves by more than ours when other traffic ran
    draft_tokens: str
    accepted: str
    drafts: str  # verify steps: one per draft the target checked
    per_position: str  # accepted tokens per draft position, labelled position="i"
    exact_below: float = math.inf  # values from here on may be rounded in the text

    @property
    def source(self) -> str:
        return f"prometheus /metrics ({self.family})"


@dataclass(frozen=True)
class SpecCounters:
    """One reading of an engine's counters (server-wide totals since it started)."""

    names: CounterNames
    generated: float
    draft_tokens: float
    accepted: float
    drafts: float
    per_position: tuple[float, ...]  # empty where the server exposes none (yet)
    problem: str | None = None  # why these values are no counts (NaN, negative, a position past MAX_POSITIONS)

    @property
    def totals(self) -> dict[str, float]:
        """The four counters by their names on /metrics."""
        names = self.names
        return {names.generated: self.generated, names.draft_tokens: self.draft_tokens, names.accepted: self.accepted,
                names.drafts: self.drafts}


def reading_of(samples: list[Sample], names: CounterNames) -> SpecCounters | None:
    """The engine's counters where its speculation and generated-token counters are all present; values that are
    no counts are kept and said in `problem`, so the reading that meets them refuses them."""
    values = [summed(samples, n) for n in (names.generated, names.draft_tokens, names.accepted, names.drafts)]
    if any(v is None for v in values):
        return None
    per_position, position_problem = _per_position(samples, names.per_position)
    reading = SpecCounters(names, *values, per_position=per_position)
    return replace(reading, problem=_not_counts(reading.totals) or position_problem)


def _per_position(samples: list[Sample], base: str) -> tuple[tuple[float, ...], str | None]:
    """(accepted tokens per draft position, position 0 first; why they are unusable, or None)."""
    totals: dict[int, float] = {}
    for sample in matching(samples, base):
        position = sample.labels.get("position", "")
        if not position.isdigit():
            continue
        if int(position) >= MAX_POSITIONS:
            return (), f'{base}{{position="{position[:20]}"}} is past the {MAX_POSITIONS} draft positions read'
        totals[int(position)] = totals.get(int(position), 0.0) + sample.value
    per_position = tuple(totals.get(i, 0.0) for i in range(max(totals) + 1)) if totals else ()
    return per_position, _not_counts({f"{base}[{i}]": v for i, v in enumerate(per_position)})


def _not_counts(values: dict[str, float]) -> str | None:
    """Why any of the values is no counter's value (not finite, negative), or None."""
    for name, value in values.items():
        if not math.isfinite(value) or value < 0:
            return f"{name} is {value:g}, not a count"
    return None
