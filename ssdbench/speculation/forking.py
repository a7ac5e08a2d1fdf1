"""The fork: which candidate bonus tokens to branch on, per accepted count, likeliest first."""

from __future__ import annotations

import torch

from ssdbench.sampling.params import RowSampling
from ssdbench.speculation.fan_out import FanOut
from ssdbench.speculation.tree import Branch


def outcome_probabilities(acceptance: float, depth: int) -> list[float]:
    """P(exactly k of `depth` drafts accepted) under a per-token acceptance rate."""
    a = acceptance
    return [a**k * (1 - a) for k in range(depth)] + [a**depth]


def fork_row(glue_logits: torch.Tensor, returned: list[int], fan: list[int], temperature: float,
             acceptance: float) -> list[Branch]:
    """glue_logits [d+1, V]: row k predicts the bonus after k accepted drafts.

    A just-rejected draft x_{k+1} cannot be the bonus (its residual mass is zero), so it is
    excluded for k < d; all-accepted (k = d) has no exclusion.
    """
    probs = torch.softmax(glue_logits.float() / (temperature if temperature > 0 else 1.0), dim=-1)  # [d+1, V]
    p_outcome = outcome_probabilities(acceptance, len(returned))
    branches = []
    for k, f in enumerate(fan):
        if f == 0:
            continue
        top = probs[k].topk(min(f + 1, probs.shape[-1]))
        kept = [(float(p), int(c)) for p, c in zip(top.values, top.indices) if k >= len(returned) or c != returned[k]]
        branches.extend(Branch(accepted=k, bonus=c, score=p_outcome[k] * p) for p, c in kept[:f])
    return branches


def fork_branches(rows, glue: list[torch.Tensor | None], fan_out: FanOut, sampling: RowSampling,
                  acceptance: float, *, cap: int) -> list[list[Branch]]:
    """Per row, the `cap` likeliest branches (a tree cut short still holds the likeliest ones)."""
    temperatures = sampling.temperature.tolist()
    forks = []
    for b, row in enumerate(rows):
        if glue[b] is None:
            forks.append([])
            continue
        depth = len(row.returned)
        # auto: any outcome may take up to the whole cap; the scores (outcome probability under the measured
        # acceptance x the candidate's probability) decide, so the branches follow the acceptance seen.
        fan = [cap] * (depth + 1) if fan_out.auto else fan_out.for_row(missed=row.missed, depth=depth)
        branches = fork_row(glue[b], row.returned, fan, temperatures[b], acceptance)
        forks.append(sorted(branches, key=lambda br: -br.score)[:cap])
    return forks
