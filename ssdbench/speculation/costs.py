"""Measured costs on the draft side, for sizing the tree and choosing a backup per round.

Everything is an exponential moving average of what this server has timed itself, so
the choices follow the hardware actually in use (docs/DESIGN.md §5.5 and §5.6).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

SMOOTHING = 0.3  # weight of the newest measurement
ROUND_WINDOW = 9  # verifier rounds the round time is the median of


def _ema(old: float | None, new: float) -> float:
    return new if old is None else (1 - SMOOTHING) * old + SMOOTHING * new


@dataclass
class CostModel:
    round_ms: float | None = None  # response sent -> next request: the verifier's round, as seen here
    glue_ms: float | None = None
    jit_ms: float | None = None
    step_base_ms: float | None = None  # tree step cost = base + per_branch * width
    step_per_branch_ms: float = 0.0
    _widths: list[tuple[int, float]] = field(default_factory=list)
    _rounds: list[float] = field(default_factory=list)
    _last_width: int = 1
    tokens_by_kind: dict[str, float] = field(default_factory=dict)  # mean tokens per round after hit/jit/fast

    def note_round(self, ms: float) -> None:
        """The verifier's round: the median of the last few, so one slow round (a warm-up's first verify)
        does not size the next trees."""
        self._rounds = (self._rounds + [ms])[-ROUND_WINDOW:]
        self.round_ms = statistics.median(self._rounds)

    def note_glue(self, ms: float) -> None:
        self.glue_ms = _ema(self.glue_ms, ms)

    def note_jit(self, ms: float) -> None:
        self.jit_ms = _ema(self.jit_ms, ms)

    def note_tree_step(self, width: int, ms: float) -> None:
        """Fit step cost against width from the most recent samples (least squares on two moments)."""
        self._widths = (self._widths + [(width, ms)])[-32:]
        widths = [w for w, _ in self._widths]
        if max(widths) == min(widths):
            self.step_base_ms = _ema(self.step_base_ms, ms / 2)
            self.step_per_branch_ms = (ms - self.step_base_ms) / max(width, 1)
            return
        n = len(self._widths)
        mean_w = sum(widths) / n
        mean_t = sum(t for _, t in self._widths) / n
        cov = sum((w - mean_w) * (t - mean_t) for w, t in self._widths)
        var = sum((w - mean_w) ** 2 for w in widths)
        self.step_per_branch_ms = max(cov / var, 0.0)
        self.step_base_ms = max(mean_t - self.step_per_branch_ms * mean_w, 0.0)

    def note_tokens(self, kind: str, tokens: int) -> None:
        self.tokens_by_kind[kind] = _ema(self.tokens_by_kind.get(kind), float(tokens))

    def branches_that_fit(self, depth: int, cap: int, *, headroom: float = 0.9) -> int:
        """Largest width whose glue + `depth` tree steps fit inside one verify round (at least 1).

        One branch until the round, the glue and a tree step have been timed: a first tree as wide as the
        budget outran the verify, and the mode chooser's first probe judged the tree by it."""
        if self.round_ms is None or self.step_base_ms is None or self.glue_ms is None:
            return min(cap, 1)
        budget = headroom * self.round_ms - self.glue_ms
        per_step = budget / max(depth, 1) - self.step_base_ms
        if self.step_per_branch_ms <= 0:
            fits = cap if per_step > 0 else 1
        else:
            fits = int(min(cap, max(1, per_step // self.step_per_branch_ms)))
        # Grow one branch a round, shrink at once: a width is tried (and its step timed) before a wider one.
        self._last_width = min(fits, self._last_width + 1)
        return self._last_width

    def prefer_jit(self, num_missing: int, expected_tokens_others: float) -> bool:
        """Jit if its extra tokens pay for the verifier's wait: compare throughput with and without it."""
        jit_tokens = self.tokens_by_kind.get("jit", 2.0)
        fast_tokens = self.tokens_by_kind.get("fast", 1.0)
        if self.round_ms is None or self.jit_ms is None:
            return True  # measure jit once before judging it
        with_fast = (expected_tokens_others + num_missing * fast_tokens) / self.round_ms
        with_jit = (expected_tokens_others + num_missing * jit_tokens) / (self.round_ms + self.jit_ms)
        return with_jit > with_fast
