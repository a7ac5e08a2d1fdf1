"""The seams of the round loop: what a model must offer, and what a proposer returns."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch


class CausalModel(Protocol):
    """A model with its own static KV cache (native engine or transformers' code)."""

    vocab_size: int
    device: torch.device

    def allocate(self, batch_size: int, max_len: int) -> None: ...

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """tokens, positions: [B, T] -> fp32 logits [B, T, V]; writes K/V at those positions."""
        ...


@dataclass(frozen=True)
class Proposal:
    """Up to K draft tokens per row, and the exact distributions they were drawn from."""

    tokens: torch.Tensor  # [B, K] int64; columns past num_proposed are padding
    q: torch.Tensor | None  # [B, K, V] fp32, or None when every row is a point mass (not sampled)
    num_proposed: torch.Tensor  # [B] int64
    draft_ms: float = 0.0  # time spent producing it (the draft's own work)
    wait_ms: float = 0.0  # time the verifier sat waiting for it
    cache_hit: tuple[bool | None, ...] | None = None  # per row, SSD only
    backup: tuple[str | None, ...] | None = None  # per row, SSD only
    fan_out_total: tuple[int | None, ...] | None = None  # per row, SSD only

    @property
    def width(self) -> int:
        return int(self.num_proposed.max()) if self.num_proposed.numel() else 0


class Proposer(Protocol):
    """Produces each round's proposal; AR has none."""

    name: str

    def prefill(self, batch: "DecodeBatch") -> None: ...  # noqa: F821

    def propose(self, batch: "DecodeBatch") -> Proposal: ...  # noqa: F821

    def observe(self, batch: "DecodeBatch", num_accepted: list[int]) -> None: ...  # noqa: F821

    def close(self) -> None: ...


def empty_proposal(num_rows: int, device: torch.device) -> Proposal:
    """AR's proposal: nothing, so verify is a plain one-token decode step."""
    return Proposal(
        tokens=torch.zeros(num_rows, 0, dtype=torch.int64, device=device),  # [B, 0]
        q=None,
        num_proposed=torch.zeros(num_rows, dtype=torch.int64, device=device),  # [B]
    )
