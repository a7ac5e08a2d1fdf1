"""Forward rows of different lengths in one call: right-pad, and read each row's own last logit.

Padding tokens sit at slots after the row's real ones, so the causal (by slot) mask hides
them from real tokens, and later steps overwrite them.
"""

from __future__ import annotations

import torch

from ssdbench.decoding.protocols import CausalModel

PAD_TOKEN = 0


def forward_chunks(model: CausalModel, chunks: list[list[int]], starts: list[int], *, return_hidden: bool = False):
    """Append chunks[b] at positions starts[b]...; returns logits [B, T, V] (T = longest chunk),
    or (logits, hidden [B, T, H]) with return_hidden."""
    width = max(len(c) for c in chunks)
    tokens = torch.tensor([c + [PAD_TOKEN] * (width - len(c)) for c in chunks], dtype=torch.int64)  # [B, T]
    offsets = torch.arange(width, dtype=torch.int64)  # [T]
    positions = torch.tensor(starts, dtype=torch.int64).unsqueeze(1) + offsets  # [B, T]
    if return_hidden:
        return model.forward(tokens.to(model.device), positions.to(model.device), return_hidden=True)
    return model.forward(tokens.to(model.device), positions.to(model.device))


def last_logits(logits: torch.Tensor, lengths: list[int]) -> torch.Tensor:
    """logits [B, T, V] -> [B, V] at each row's last real token (index lengths[b] - 1)."""
    index = torch.tensor(lengths, dtype=torch.int64, device=logits.device) - 1  # [B]
    rows = torch.arange(logits.shape[0], device=logits.device)
    return logits[rows, index]
