"""Speculation counters from a server's Prometheus `GET /metrics` text: the fallback for engines whose
responses carry no per-request acceptance (and the verify steps llama-server's responses lack).

The counters are server-wide totals, so a request's figures are the difference between a reading
before it and one after it; `counter_acceptance` decides when that difference is this request's alone.
Shapes read (a `_total` suffix and any labels are accepted; label sets are summed, positions apart):

- llama.cpp `llama-server --metrics`: `llamacpp:spec_decode_num_draft_tokens_total`,
  `..._num_accepted_tokens_total`, `..._num_drafts_total` (verify steps),
  `..._num_accepted_tokens_per_pos_total{position="i"}` (once a draft ran) and
  `llamacpp:tokens_predicted_total`. Values are printed with 6 significant digits, so past 1e6 a
  difference is no longer exact.
- vLLM: `vllm:spec_decode_num_drafts`, `..._num_draft_tokens`, `..._num_accepted_tokens`,
  `..._num_accepted_tokens_per_pos{position="i"}` and `vllm:generation_tokens`, labelled with
  `model_name` and `engine`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace

SAMPLE = re.compile(r"^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)(?:\s+-?\d+)?\s*$")
MAX_POSITIONS = 256  # draft positions read: far beyond any engine's draft length, and a bound on what is allocated
LABEL = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


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


LLAMA_CPP = CounterNames("llamacpp:spec_decode_*", "llamacpp:tokens_predicted",
                         "llamacpp:spec_decode_num_draft_tokens", "llamacpp:spec_decode_num_accepted_tokens",
                         "llamacpp:spec_decode_num_drafts", "llamacpp:spec_decode_num_accepted_tokens_per_pos",
                         exact_below=1e6)
VLLM = CounterNames("vllm:spec_decode_*", "vllm:generation_tokens", "vllm:spec_decode_num_draft_tokens",
                    "vllm:spec_decode_num_accepted_tokens", "vllm:spec_decode_num_drafts",
                    "vllm:spec_decode_num_accepted_tokens_per_pos")
FAMILIES = (LLAMA_CPP, VLLM)


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


def parse_samples(text: str) -> list[Sample]:
    """Every sample line of the text exposition format; comments, blank and unreadable lines skipped
    (the reading is a fallback: a line it cannot read must not fail a request)."""
    samples = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = SAMPLE.match(line)
        if match is None:
            continue
        try:
            value = float(match["value"])
        except ValueError:
            continue
        samples.append(Sample(match["name"], dict(LABEL.findall(match["labels"] or "")), value))
    return samples


def _matching(samples: list[Sample], base: str) -> list[Sample]:
    return [s for s in samples if s.name in (base, base + "_total")]


def _summed(samples: list[Sample], base: str) -> float | None:
    found = _matching(samples, base)
    return sum(s.value for s in found) if found else None


def _per_position(samples: list[Sample], base: str) -> tuple[tuple[float, ...], str | None]:
    """(accepted tokens per draft position, position 0 first; why they are unusable, or None)."""
    totals: dict[int, float] = {}
    for sample in _matching(samples, base):
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


def counters_in(text: str) -> SpecCounters | None:
    """The first engine family whose speculation and generated-token counters are all present; values that are
    no counts are kept and said in `problem`, so the reading that meets them refuses them."""
    samples = parse_samples(text)
    for names in FAMILIES:
        values = [_summed(samples, n) for n in (names.generated, names.draft_tokens, names.accepted, names.drafts)]
        if all(v is not None for v in values):
            per_position, position_problem = _per_position(samples, names.per_position)
            reading = SpecCounters(names, *values, per_position=per_position)
            return replace(reading, problem=_not_counts(reading.totals) or position_problem)
    return None
