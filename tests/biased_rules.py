"""Deliberately wrong acceptance rules, for showing that the goodness-of-fit tests have power.

Each has the signature of `ssdbench.sampling.accept.verify_proposal` and is passed to the
real round loop in its place; an exactness test that cannot reject these proves nothing.
"""

from __future__ import annotations

import torch

from ssdbench.sampling.accept import Verdict, verify_proposal
from ssdbench.sampling.params import RowSampling
from ssdbench.sampling.probs import logits_to_probs, sample_from


def argmax_matching(target_logits, draft_tokens, draft_q, num_proposed, sampling, generator) -> Verdict:
    """The reference engine's bias: under sampling, accept a draft iff it is the target's argmax."""
    as_greedy = RowSampling(sampling.temperature * 0, sampling.top_p, sampling.top_k)
    n = verify_proposal(target_logits, draft_tokens, None, num_proposed, as_greedy, generator).num_accepted  # [B]
    p = logits_to_probs(target_logits, sampling)  # [B, K+1, V]
    next_token = sample_from(p[torch.arange(p.shape[0]), n], generator)  # [B]
    return Verdict(num_accepted=n, next_token=next_token)


def uniform_bonus(target_logits, draft_tokens, draft_q, num_proposed, sampling, generator) -> Verdict:
    """Exact, except that the bonus after all K drafts were accepted is drawn uniformly."""
    verdict = verify_proposal(target_logits, draft_tokens, draft_q, num_proposed, sampling, generator)
    num_rows, vocab = target_logits.shape[0], target_logits.shape[-1]
    uniform = torch.randint(vocab, (num_rows,), generator=generator, device=target_logits.device)  # [B]
    all_accepted = (verdict.num_accepted == num_proposed) & (num_proposed > 0)  # [B]
    return Verdict(num_accepted=verdict.num_accepted, next_token=torch.where(all_accepted, uniform, verdict.next_token))
