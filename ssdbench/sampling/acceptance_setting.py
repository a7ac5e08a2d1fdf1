"""The `--acceptance` setting: `exact`, or `synthetic:RATE[,hit=H]` (see synthetic.py). Parsed without
torch, so the command line can check it before any heavy import."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from ssdbench.errors import UsageError

EXACT = "exact"
_SPEC = re.compile(r"synthetic:([^,]+)(?:,hit=(.+))?")


@dataclass(frozen=True)
class SyntheticAcceptance:
    """Accept each drafted token with probability `rate`; with `hit`, steer ssd's bonus onto the cache."""

    rate: float
    hit: float | None = None

    @property
    def label(self) -> str:
        """The canonical text, as the manifest and the steps table record it."""
        return f"synthetic:{self.rate:g}" + ("" if self.hit is None else f",hit={self.hit:g}")


def parse_acceptance(text: str) -> SyntheticAcceptance | None:
    """`exact` -> None; `synthetic:RATE[,hit=H]` with RATE in (0, 1], H in [0, 1]; else a one-line UsageError."""
    text = text.strip()
    if text == EXACT:
        return None
    match = _SPEC.fullmatch(text)
    if match is None:
        raise UsageError(f"--acceptance: expected 'exact' or 'synthetic:RATE[,hit=H]' (e.g. synthetic:0.8), "
                         f"got '{text}'")
    rate = _number(match.group(1), "RATE")
    if not 0 < rate <= 1:
        raise UsageError(f"--acceptance {text}: RATE must be in (0, 1], got {rate:g}")
    if match.group(2) is None:
        return SyntheticAcceptance(rate)
    hit = _number(match.group(2), "hit")
    if not 0 <= hit <= 1:
        raise UsageError(f"--acceptance {text}: hit must be in [0, 1], got {hit:g}")
    return SyntheticAcceptance(rate, hit)


def _number(text: str, name: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise UsageError(f"--acceptance: {name} must be a number, got '{text}'") from None
    if not math.isfinite(value):
        raise UsageError(f"--acceptance: {name} must be a finite number, got '{text}'")
    return value
