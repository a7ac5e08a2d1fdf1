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
    tokens, positions = padded(chunks, starts, model.device)
    if return_hidden:
        return model.forward(tokens, positions, return_hidden=True)
    return model.forward(tokens, positions)


def padded(chunks: list[list[int]], starts: list[int], device) -> tuple[torch.Tensor, torch.Tensor]:
    """The chunks right-padded to the longest, tokens [B, T], and their positions from starts[b], [B, T]."""
    width = max(len(c) for c in chunks)
    tokens = torch.tensor([c + [PAD_TOKEN] * (width - len(c)) for c in chunks], dtype=torch.int64)  # [B, T]
    positions = torch.tensor(starts, dtype=torch.int64).unsqueeze(1) + torch.arange(width, dtype=torch.int64)  # [B, T]
    return tokens.to(device), positions.to(device)


def last_logits(logits: torch.Tensor, lengths: list[int]) -> torch.Tensor:
    """logits [B, T, V] -> [B, V] at each row's last real token (index lengths[b] - 1)."""
    index = torch.tensor(lengths, dtype=torch.int64, device=logits.device) - 1  # [B]
    rows = torch.arange(logits.shape[0], device=logits.device)
    return logits[rows, index]


def forward_last(model: CausalModel, chunks: list[list[int]], starts: list[int]) -> torch.Tensor:
    """forward_chunks, but only each row's last logits [B, V] come out of the lm_head. A prompt's other rows
    need none (a prefill draws one token, a catch-up chunk drafts from its last): on the embedded pair the
    lm_head is a fifth of a token's multiply-adds. Models that cannot pick columns (a plain CausalModel,
    without TreeModel's logits_at) compute every row's and the last is read."""
    lengths = [len(c) for c in chunks]
    if not hasattr(model, "copy_slots"):  # not a TreeModel: no logits_at
        return last_logits(forward_chunks(model, chunks, starts), lengths)
    tokens, positions = padded(chunks, starts, model.device)
    width = tokens.shape[1]
    last = torch.tensor([[n - 1 if n else width - 1] for n in lengths], dtype=torch.int64)  # [B, 1]; empty: as last_logits
    return model.forward(tokens, positions, logits_at=last.to(model.device))[:, 0]  # [B, V]

