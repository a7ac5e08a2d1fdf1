"""Prometheus' text exposition format (`GET /metrics`), read into samples: a name, its labels, a value.

Nothing here knows an engine: which counters mean what is each engine's declaration
(`engines/*.py`, a `CounterNames`), read into a reading by `counters.py`. A `_total` suffix, which a
Prometheus client may add to a counter's name, reads as the same counter.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

SAMPLE = re.compile(r"^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)(?:\s+-?\d+)?\s*$")
LABEL = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


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


def matching(samples: list[Sample], base: str) -> list[Sample]:
    """The samples of the counter `base`, with or without its `_total` suffix, every label set."""
    return [s for s in samples if s.name in (base, base + "_total")]


def summed(samples: list[Sample], base: str) -> float | None:
    """The counter's value summed over its label sets; None where the text has no such counter."""
    found = matching(samples, base)
    return sum(s.value for s in found) if found else None
