"""The seams of the round loop: what a model must offer, and what a proposer returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import torch

from ssdbench.sampling.accept import Verdict


class CausalModel(Protocol):
    """A model with its own static KV cache (native engine or transformers' code)."""

    vocab_size: int
    device: torch.device

    def allocate(self, batch_size: int, max_len: int) -> None: ...

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, *, return_hidden: bool = False):
        """tokens, positions: [B, T] -> fp32 logits [B, T, V]; writes K/V at those positions.
        return_hidden: (logits, hidden [B, T, H]), the final-norm'd states the lm_head reads."""
        ...


class TreeModel(CausalModel, Protocol):
    """A CausalModel that also runs trees (ssd's draft): K/V written at named slots under an explicit
    mask, logits read at chosen columns, and K/V copied between slots of a row (docs/DESIGN.md §4.1)."""

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, *, slots: torch.Tensor | None = None,
                attn_mask: torch.Tensor | None = None, logits_at: torch.Tensor | None = None,
                return_hidden: bool = False): ...

    def copy_slots(self, row: int, src: torch.Tensor, dst: torch.Tensor) -> None: ...


@dataclass(frozen=True)
class VerifyOutput:
    """What the target's verify forward produced, handed to the proposer after each round."""

    logits: torch.Tensor  # [B, 1+W, V] fp32: pending token, then the W proposed columns
    hidden: torch.Tensor | None = None  # [B, 1+W, H]: final-norm'd hidden states; only when asked for


@dataclass(frozen=True)
class Proposal:
    """Up to K draft tokens per row, and the exact distributions they were drawn from."""

    tokens: torch.Tensor  # [B, K] int64; columns past num_proposed are padding
    q: torch.Tensor | None  # [B, K, V] fp32, or None when every row is a point mass (not sampled)
    num_proposed: torch.Tensor  # [B] int64
    draft_ms: float = 0.0  # time spent producing it (the draft's own work)
    wait_ms: float = 0.0  # time the verifier sat waiting for it
    extras: dict[str, tuple] = field(default_factory=dict)  # a method's own per-row telemetry, by steps column

    @property
    def width(self) -> int:
        return int(self.num_proposed.max()) if self.num_proposed.numel() else 0


class Proposer(Protocol):
    """Produces each round's proposal; AR has none."""

    name: str
    wants_hidden: bool  # ask the verify forward for the target's hidden states (EAGLE-style drafts)

    def prefill(self, batch: "DecodeBatch") -> None: ...  # noqa: F821

    def observe_prefill(self, batch: "DecodeBatch", output: VerifyOutput) -> None:  # noqa: F821
        """After the target's prefill: its output over the prompts, each prompt's last logits [B, 1, V] (every
        row's [B, T] right-padded, with hidden states, for a proposer that wants_hidden)."""
        ...

    def propose(self, batch: "DecodeBatch") -> Proposal: ...  # noqa: F821

    def observe(self, batch: "DecodeBatch", verdict: Verdict, output: VerifyOutput) -> None:  # noqa: F821
        """After the commit: the acceptance verdict (accepted counts, bonus tokens) and the target's output."""
        ...

    def close(self) -> None: ...


def empty_proposal(num_rows: int, device: torch.device) -> Proposal:
    """AR's proposal: nothing, so verify is a plain one-token decode step."""
    return Proposal(
        tokens=torch.zeros(num_rows, 0, dtype=torch.int64, device=device),  # [B, 0]
        q=None,
        num_proposed=torch.zeros(num_rows, dtype=torch.int64, device=device),  # [B]
    )
