"""Drawing draft tokens: the exact q' each token came from (temperature, top-p, Saguaro)."""

from __future__ import annotations

import torch

from ssdbench.sampling.params import RowSampling
from ssdbench.sampling.probs import logits_to_probs, sample_from
from ssdbench.sampling.saguaro import saguaro_reweight


def repeat_rows(sampling: RowSampling, times: int) -> RowSampling:
    """Row b's settings for each of its `times` branches: [B] -> [B * times] (branch-major within row)."""
    return RowSampling(
        temperature=sampling.temperature.repeat_interleave(times),
        top_p=sampling.top_p.repeat_interleave(times),
        top_k=tuple(k for k in sampling.top_k for _ in range(times)),
    )


def draw(logits: torch.Tensor, sampling: RowSampling, fan_out: torch.Tensor, *, saguaro_c: float,
         generator: torch.Generator | None, need_q: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """logits [M, V] -> tokens [M] and q' [M, V] (None when every row is greedy and no q is needed).

    Greedy rows come out as one-hot q (a point mass at the argmax), unchanged by Saguaro.
    """
    if sampling.all_greedy and not need_q:
        return logits.argmax(dim=-1), None
    q = logits_to_probs(logits.unsqueeze(1), sampling)[:, 0]  # [M, V]
    q = saguaro_reweight(q, fan_out, saguaro_c)
    return sample_from(q, generator), q

