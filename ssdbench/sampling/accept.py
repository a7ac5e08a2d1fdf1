"""The acceptance rule of speculative decoding (docs/DESIGN.md §3): one pure tensor function.

p is the target's distribution, q the draft's. Every proposal carries the exact q its
tokens were drawn from; a proposal that was not sampled carries a point mass (one-hot q).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ssdbench.sampling.params import RowSampling
from ssdbench.sampling.probs import logits_to_probs, sample_from


@dataclass(frozen=True)
class Verdict:
    """Outcome of verifying one round, per row."""

    num_accepted: torch.Tensor  # [B] int64, 0..num_proposed
    next_token: torch.Tensor  # [B] int64, the bonus / correction token


def verify_proposal(
    target_logits: torch.Tensor,
    draft_tokens: torch.Tensor,
    draft_q: torch.Tensor | None,
    num_proposed: torch.Tensor,
    sampling: RowSampling,
    generator: torch.Generator | None,
) -> Verdict:
    """Accept a prefix of each row's proposal and draw the next token, exactly.

    target_logits: [B, K+1, V] at positions [pending, x_1..x_K]; draft_tokens: [B, K];
    draft_q: [B, K, V] the distributions x was drawn from (None: all point masses);
    num_proposed: [B] how many of the K columns are real for each row (the rest is padding).
    """
    if sampling.all_greedy:
        return _verify_greedy(target_logits, draft_tokens, num_proposed)
    p = logits_to_probs(target_logits, sampling)  # [B, K+1, V]
    return _verify_sampled(p, draft_tokens, draft_q, num_proposed, generator)


def _verify_greedy(target_logits: torch.Tensor, draft_tokens: torch.Tensor, num_proposed: torch.Tensor) -> Verdict:
    best = target_logits.argmax(dim=-1)  # [B, K+1]
    num_k = draft_tokens.shape[1]
    accepted = (draft_tokens == best[:, :num_k]) & real_columns(num_proposed, num_k)  # [B, K]
    num_accepted = leading_true(accepted)  # [B]
    next_token = best.gather(1, num_accepted.unsqueeze(1)).squeeze(1)  # [B]
    return Verdict(num_accepted=num_accepted, next_token=next_token)


def _verify_sampled(
    p: torch.Tensor,
    draft_tokens: torch.Tensor,
    draft_q: torch.Tensor | None,
    num_proposed: torch.Tensor,
    generator: torch.Generator | None,
) -> Verdict:
    num_rows, num_k = draft_tokens.shape
    tokens = draft_tokens.clamp_min(0).unsqueeze(-1)  # [B, K, 1]
    p_x = p[:, :num_k].gather(-1, tokens).squeeze(-1)  # [B, K]
    q_x = torch.ones_like(p_x) if draft_q is None else draft_q.gather(-1, tokens).squeeze(-1)  # [B, K]
    u = torch.rand(p_x.shape, generator=generator, device=p_x.device)  # [B, K] in [0, 1)
    # u < p/q has probability min(1, p/q); strict so that p(x) = 0 can never accept.
    accepted = (u * q_x < p_x) & real_columns(num_proposed, num_k)  # [B, K]
    num_accepted = leading_true(accepted)  # [B]
    next_dist = _next_token_distribution(p, draft_q, draft_tokens, num_accepted, num_proposed)  # [B, V]
    return Verdict(num_accepted=num_accepted, next_token=sample_from(next_dist, generator))


def _next_token_distribution(
    p: torch.Tensor,
    draft_q: torch.Tensor | None,
    draft_tokens: torch.Tensor,
    num_accepted: torch.Tensor,
    num_proposed: torch.Tensor,
) -> torch.Tensor:
    """normalize(max(0, p_n - q_n)) after a rejection at n; p_n itself when all were accepted."""
    rows = torch.arange(p.shape[0], device=p.device)
    p_n = p[rows, num_accepted]  # [B, V]
    rejected = num_accepted < num_proposed  # [B]
    if not bool(rejected.any()):
        return p_n
    col = num_accepted.clamp_max(draft_tokens.shape[1] - 1)  # [B]
    if draft_q is None:
        q_n = torch.zeros_like(p_n).scatter_(-1, draft_tokens[rows, col].clamp_min(0).unsqueeze(-1), 1.0)
    else:
        q_n = draft_q[rows, col]  # [B, V]
    residual = (p_n - q_n).clamp_min(0)  # [B, V]
    mass = residual.sum(dim=-1, keepdim=True)  # [B, 1]
    residual = torch.where(mass > 0, residual / mass.clamp_min(1e-30), p_n)
    return torch.where(rejected.unsqueeze(-1), residual, p_n)


def real_columns(num_proposed: torch.Tensor, num_k: int) -> torch.Tensor:
    columns = torch.arange(num_k, device=num_proposed.device)  # [K]
    return columns.unsqueeze(0) < num_proposed.unsqueeze(1)  # [B, K]


def leading_true(flags: torch.Tensor) -> torch.Tensor:
    """Length of the all-True prefix of each row. flags: [B, K] -> [B] int64."""
    if flags.shape[1] == 0:
        return torch.zeros(flags.shape[0], dtype=torch.int64, device=flags.device)
    return flags.long().cumprod(dim=1).sum(dim=1)
