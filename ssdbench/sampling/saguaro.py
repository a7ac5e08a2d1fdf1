"""Saguaro sampling (docs/DESIGN.md §5.7): draw drafts from q' that down-weights the draft's top-F.

The top-F tokens are the ones the speculator caches as bonus candidates; moving mass away
from them puts the residual max(0, p - q') on cached tokens (hit rate up) at some cost in
acceptance. Exactness only needs verification to see q' itself, which callers pass on.
"""

from __future__ import annotations

import torch


def saguaro_reweight(q: torch.Tensor, fan_out: torch.Tensor, c: float) -> torch.Tensor:
    """q [N, V] -> q' [N, V]: the top fan_out[n] tokens of each row scaled by c, renormalised.

    fan_out: [N] int64 (0 leaves a row unchanged). c in (0, 1]; c = 1 returns q unchanged.
    """
    if c >= 1.0 or not bool((fan_out > 0).any()):
        return q
    fan_out = fan_out.to(q.device)
    width = int(fan_out.max())
    top = q.topk(width, dim=-1).indices  # [N, F_max]
    in_top = torch.arange(width, device=q.device).unsqueeze(0) < fan_out.unsqueeze(1)  # [N, F_max]
    scale = torch.ones_like(q).scatter_(-1, top, torch.where(in_top, c, 1.0).to(q.dtype))  # [N, V]
    reweighted = q * scale
    return reweighted / reweighted.sum(dim=-1, keepdim=True)
