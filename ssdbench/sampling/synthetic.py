"""Synthetic acceptance (`--acceptance synthetic:RATE[,hit=H]`, docs/DESIGN.md §3.1): a timing aid,
not an acceptance rule. Random-weight pairs agree on nothing, so sd and ssd would accept nothing and
time nothing useful; here each drafted token is accepted with probability RATE instead.

Only the accepted length is synthetic: the round still costs one target forward over K+1 positions and
the same draft steps, and the token after the accepted prefix is still the target's (its argmax, or a
draw from its p; after a rejection, excluding the rejected draft, as the exact rule's residual does).
Outputs are therefore NOT the target's; runs say so everywhere.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ssdbench.sampling.acceptance_setting import SyntheticAcceptance
from ssdbench.sampling.accept import Verdict, leading_true, real_columns
from ssdbench.sampling.params import RowSampling
from ssdbench.sampling.probs import logits_to_probs, sample_from

SEED_OFFSET = 0x53594E  # the synthetic coins' stream is distinct from the sampling generator's

HeldBonuses = Callable[[list[int]], list[list[int]]]  # num_accepted per row -> bonus tokens the cache holds for it


def synthetic_num_accepted(num_proposed: torch.Tensor, width: int, rate: float,
                           coins: torch.Generator) -> torch.Tensor:
    """Independent Bernoulli(rate) per drafted position; the first rejection ends the prefix.

    num_proposed: [B] (any device) -> [B] int64 on CPU. Always draws B x width coins, so the stream
    does not depend on which rows are real.
    """
    u = torch.rand((num_proposed.shape[0], width), generator=coins)  # [B, K] in [0, 1): rate 1 accepts all
    accepted = (u < rate) & real_columns(num_proposed.cpu(), width)  # [B, K]
    return leading_true(accepted)


def target_token_after(target_logits: torch.Tensor, num_accepted: torch.Tensor, draft_tokens: torch.Tensor,
                       num_proposed: torch.Tensor, sampling: RowSampling,
                       generator: torch.Generator | None) -> torch.Tensor:
    """The target's own token at position n (the accepted count): argmax, or a draw from p_n; after a
    rejection, never the rejected draft x_{n+1} (as under the exact rule, whose residual has no mass there,
    and which the speculator relies on).

    target_logits: [B, K+1, V]; num_accepted, num_proposed: [B]; draft_tokens: [B, K] -> [B] int64.
    """
    rows = torch.arange(target_logits.shape[0], device=target_logits.device)
    logits_n = target_logits[rows, num_accepted].float()  # [B, V]
    rejected = num_accepted < num_proposed.to(num_accepted.device)  # [B]
    if bool(rejected.any()):
        col = num_accepted.clamp_max(max(draft_tokens.shape[1] - 1, 0))  # [B]
        x = draft_tokens.to(logits_n.device)[rows, col].clamp_min(0)  # [B] the rejected drafts
        banned = torch.zeros_like(logits_n, dtype=torch.bool).scatter_(-1, x.unsqueeze(-1), True)  # [B, V]
        logits_n = logits_n.masked_fill(banned & rejected.unsqueeze(-1), float("-inf"))
    if sampling.all_greedy:
        return logits_n.argmax(dim=-1)
    return sample_from(logits_to_probs(logits_n.unsqueeze(1), sampling)[:, 0], generator)


def steer_bonus(next_token: list[int], held: list[list[int]], hit: float, coins: torch.Generator) -> list[int]:
    """With probability `hit` per row, swap the bonus for one of the tokens the speculation cache holds
    for that row's accepted count (uniformly); rows with none held keep the target's token (a miss)."""
    u = torch.rand(len(next_token), generator=coins).tolist()  # [B] hit coins
    pick = torch.rand(len(next_token), generator=coins).tolist()  # [B] which held token
    steered = list(next_token)
    for b, tokens in enumerate(held):
        if tokens and u[b] < hit:
            steered[b] = tokens[int(pick[b] * len(tokens))]
    return steered


class SyntheticRule:
    """Drop-in for `verify_proposal` (the round loop's `verify`), for one batch.

    held_bonuses: ssd's proposer hook, asked only when `hit` is set; sd has none.
    """

    def __init__(self, acceptance: SyntheticAcceptance, *, seed: int, held_bonuses: HeldBonuses | None = None) -> None:
        self.acceptance = acceptance
        self.coins = torch.Generator().manual_seed(seed + SEED_OFFSET)  # CPU: the same coins on every device
        self.held_bonuses = held_bonuses

    def __call__(self, target_logits: torch.Tensor, draft_tokens: torch.Tensor, draft_q: torch.Tensor | None,
                 num_proposed: torch.Tensor, sampling: RowSampling, generator: torch.Generator | None) -> Verdict:
        width = draft_tokens.shape[1]
        num_accepted = synthetic_num_accepted(num_proposed, width, self.acceptance.rate, self.coins)  # [B]
        num_accepted = num_accepted.to(target_logits.device)
        next_token = target_token_after(target_logits, num_accepted, draft_tokens, num_proposed, sampling,
                                        generator)  # [B]
        if self.acceptance.hit is not None and self.held_bonuses is not None:
            held = self.held_bonuses(num_accepted.tolist())
            steered = steer_bonus(next_token.tolist(), held, self.acceptance.hit, self.coins)
            next_token = torch.tensor(steered, dtype=torch.int64, device=next_token.device)
        return Verdict(num_accepted=num_accepted, next_token=next_token)
