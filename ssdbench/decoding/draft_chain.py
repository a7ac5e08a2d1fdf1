"""The draft's chain: catch up on what it has not seen, then draft K tokens one at a time.

Shared by sd's in-process draft (draft_model.py) and ssd's just-in-time backup
(speculation/speculator.py), so both draw their tokens in the same order from the same
forwards; only how a token is drawn from the logits differs (sd: the draft's sampling;
ssd: Saguaro's reweighting), passed in as `draw`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from ssdbench.decoding.protocols import CausalModel
from ssdbench.decoding.ragged import forward_last

Draw = Callable[[int, torch.Tensor], tuple[torch.Tensor, torch.Tensor | None]]  # (step, logits [B, V]) -> token [B], q [B, V]


@dataclass(frozen=True)
class DraftChain:
    tokens: torch.Tensor  # [B, K] int64
    q: list[torch.Tensor | None]  # per step: [B, V] or None (point masses)
    logits: torch.Tensor | None  # [B, K, V]: the distributions each token was drawn from (keep_logits)


def draft_chain(draft: CausalModel, chunks: list[list[int]], starts: list[int], *, next_position: torch.Tensor,
                steps: int, draw: Draw, keep_logits: bool = False) -> DraftChain:
    """Forward chunks[b] at starts[b] (ending with the pending token), then `steps` tokens per row.

    next_position [B]: where row b's first drafted token goes (the pending token's position + 1).
    The last drafted token is not fed back: the next round's catch-up does that if it is accepted.
    """
    logits = forward_last(draft, chunks, starts)  # [B, V]
    tokens, qs, seen = [], [], []
    for step in range(steps):
        if step > 0:  # feed the token drawn last step
            positions = (next_position + step - 1).unsqueeze(1)  # [B, 1]
            logits = draft.forward(tokens[-1].unsqueeze(1), positions)[:, 0]  # [B, V]
        if keep_logits:
            seen.append(logits)
        token, q = draw(step, logits)
        tokens.append(token)
        qs.append(q)
    return DraftChain(tokens=torch.stack(tokens, dim=1), q=qs, logits=torch.stack(seen, dim=1) if keep_logits else None)
