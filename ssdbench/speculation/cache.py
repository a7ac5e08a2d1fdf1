"""The speculation cache: for one round, (row, accepted count, bonus token) -> ready proposal."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class CachedProposal:
    tokens: list[int]  # d <= K draft tokens
    q: torch.Tensor | None  # [d, V] the exact distributions they were drawn from (None: greedy)
    branch: int = -1  # the tree branch it came from (its K/V and logits are reused by the next glue)

    @property
    def depth(self) -> int:
        return len(self.tokens)


class SpeculationCache:
    """Lives for one round: `reset` when a new tree starts, `lookup` when the outcome arrives."""

    def __init__(self, num_rows: int) -> None:
        self._rows: list[dict[tuple[int, int], CachedProposal]] = [{} for _ in range(num_rows)]

    def reset(self) -> None:
        for row in self._rows:
            row.clear()

    def store(self, row: int, accepted: int, bonus: int, proposal: CachedProposal) -> None:
        self._rows[row][(accepted, bonus)] = proposal

    def lookup(self, row: int, accepted: int, bonus: int) -> CachedProposal | None:
        found = self._rows[row].get((accepted, bonus))
        return found if found is not None and found.depth > 0 else None

    def bonuses(self, row: int, accepted: int) -> list[int]:
        """The bonus tokens a lookup for (row, accepted) would hit on."""
        return [t for (k, t), found in self._rows[row].items() if k == accepted and found.depth > 0]

    def size(self, row: int) -> int:
        return len(self._rows[row])
