"""Layout of the speculation tree in the draft's KV cache, and its attention masks.

Every branch (row b, accepted count k, candidate bonus c) continues the main line
after x_k. Branch n of a row stores its j-th token at slot `tree_base + n*K + j`, at
logical position P + k + 1 + j (P: position of the row's pending token). It sees the
main-line slots 0..P+k and its own earlier slots, nothing of other branches.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Branch:
    accepted: int  # k: how many of the last proposal's tokens this branch assumes accepted
    bonus: int  # the candidate bonus token it starts with
    score: float  # estimated probability that this is the round's outcome


@dataclass(frozen=True)
class TreeLayout:
    """Positions, slots and masks for a [B, N]-branch tree of depth K."""

    positions: torch.Tensor  # [B, N] logical position of each branch's first token
    main_visible: torch.Tensor  # [B, N] main-line slots 0..main_visible-1 are visible
    is_real: torch.Tensor  # [B, N] bool: False for padding branches (rows with fewer branches)
    tree_base: int
    depth: int  # K

    @property
    def width(self) -> int:
        return self.positions.shape[1]

    def slots(self, step: int) -> torch.Tensor:
        """Cache slots of step `step`'s tokens: [B, N]."""
        n = torch.arange(self.width, device=self.positions.device)  # [N]
        return (self.tree_base + n * self.depth + step).expand_as(self.positions)

    def mask(self, step: int, max_len: int) -> torch.Tensor:
        """bool [B, N, S]: main line up to x_k, plus the branch's own slots for steps 0..step."""
        slot = torch.arange(max_len, device=self.positions.device)  # [S]
        main = slot.view(1, 1, -1) < self.main_visible.unsqueeze(-1)  # [B, N, S]
        n = torch.arange(self.width, device=self.positions.device).view(1, -1, 1)  # [1, N, 1]
        own_start = self.tree_base + n * self.depth  # [1, N, 1]
        own = (slot.view(1, 1, -1) >= own_start) & (slot.view(1, 1, -1) <= own_start + step)  # [1, N, S]
        return main | own


def layout_tree(branches: list[list[Branch]], pending_positions: list[int], *, tree_base: int, depth: int) -> TreeLayout:
    """Pad every row to the widest row's branch count; padding branches see only themselves."""
    width = max(1, max(len(row) for row in branches))
    positions = torch.zeros(len(branches), width, dtype=torch.int64)  # [B, N]
    main_visible = torch.zeros(len(branches), width, dtype=torch.int64)  # [B, N]
    is_real = torch.zeros(len(branches), width, dtype=torch.bool)  # [B, N]
    for b, row in enumerate(branches):
        for n, branch in enumerate(row):
            positions[b, n] = pending_positions[b] + branch.accepted + 1
            main_visible[b, n] = pending_positions[b] + branch.accepted + 1
            is_real[b, n] = True
    return TreeLayout(positions, main_visible, is_real, tree_base, depth)
