"""The acceptance rule on its own: the first emitted token is distributed as p, for any q."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats

from exactness import ALPHA, reference_probs
from ssdbench.sampling.accept import verify_proposal
from ssdbench.sampling.params import RowSampling, SamplingParams
from ssdbench.sampling.probs import logits_to_probs, point_mass

V, N = 6, 60_000


def _rows(n: int, temperature: float, top_p: float = 1.0) -> RowSampling:
    return RowSampling.from_params([SamplingParams(temperature=temperature, top_p=top_p)] * n)


def _first_tokens(target_logits, draft_q, *, temperature, top_p=1.0, seed=0):
    """Draw x ~ q (or the point mass), verify one round of K=1, return each row's first emitted token."""
    gen = torch.Generator().manual_seed(seed)
    q = draft_q.expand(N, 1, V)  # [N, 1, V]
    x = torch.multinomial(q[:, 0], 1, generator=gen)  # [N, 1]
    logits = target_logits.expand(N, 2, V)  # [N, 2, V]
    verdict = verify_proposal(logits, x, q, torch.ones(N, dtype=torch.int64), _rows(N, temperature, top_p), gen)
    first = torch.where(verdict.num_accepted > 0, x[:, 0], verdict.next_token)  # [N]
    return np.bincount(first.numpy(), minlength=V)


@pytest.mark.parametrize("temperature,top_p", [(1.0, 1.0), (0.6, 1.0), (1.0, 0.7)])
@pytest.mark.parametrize("q_kind", ["sampled", "point-mass", "disjoint"])
def test_first_token_follows_p(temperature, top_p, q_kind):
    gen = torch.Generator().manual_seed(1)
    target_logits = torch.randn(1, 2, V, generator=gen) * 2  # [1, 2, V]
    if q_kind == "sampled":
        q = torch.softmax(torch.randn(1, 1, V, generator=gen) * 2, dim=-1)  # [1, 1, V]
    elif q_kind == "point-mass":
        q = point_mass(torch.tensor([[2]]), V)  # [1, 1, V]
    else:  # q puts all mass where p has little
        q = torch.softmax(-target_logits[:, :1] * 5, dim=-1)
    p = logits_to_probs(target_logits[:, :1], _rows(1, temperature, top_p))[0, 0].numpy()
    counts = _first_tokens(target_logits, q, temperature=temperature, top_p=top_p)
    support = p > 0
    assert counts[~support].sum() == 0
    expected = p[support].astype(np.float64)
    expected = expected / expected.sum() * counts.sum()
    assert stats.chisquare(counts[support], expected).pvalue > ALPHA


def test_greedy_rows_accept_only_the_argmax():
    logits = torch.tensor([[[0.0, 3.0, 1.0], [2.0, 0.0, 0.0], [0.0, 0.0, 5.0]]])  # [1, 3, 3], argmax 1, 0, 2
    drafts = torch.tensor([[1, 2]])  # first matches, second does not
    verdict = verify_proposal(logits, drafts, None, torch.tensor([2]), _rows(1, 0.0), None)
    assert verdict.num_accepted.tolist() == [1] and verdict.next_token.tolist() == [0]


def test_padding_columns_are_never_accepted():
    logits = torch.tensor([[[0.0, 3.0], [0.0, 3.0], [3.0, 0.0]]])  # argmax 1, 1, 0
    drafts = torch.tensor([[1, 1]])
    verdict = verify_proposal(logits, drafts, None, torch.tensor([1]), _rows(1, 0.0), None)
    assert verdict.num_accepted.tolist() == [1] and verdict.next_token.tolist() == [1]


def test_mixed_greedy_and_sampled_rows():
    """Greedy rows accept the argmax outright; sampled rows beside them accept it with probability p(x),
    and their first emitted token still follows p."""
    gen = torch.Generator().manual_seed(0)
    logits = (torch.randn(1, 3, V, generator=gen) * 1.5).expand(N, 3, V)  # [N, 3, V]
    drafts = logits.argmax(-1)[:, :2]  # [N, 2]: every row proposes the target's argmax
    is_greedy = torch.arange(N) % 2 == 1  # [N]
    sampling = RowSampling.from_params([SamplingParams(0.0 if g else 1.0) for g in is_greedy.tolist()])
    verdict = verify_proposal(logits, drafts, point_mass(drafts, V), torch.full((N,), 2), sampling, gen)
    assert (verdict.num_accepted[is_greedy] == 2).all()
    assert (verdict.next_token[is_greedy] == logits[0, 2].argmax()).all()
    p = reference_probs(logits[0].numpy(), temperature=1.0)  # [3, V], independent of ssdbench.sampling
    sampled = ~is_greedy
    accepted_first = int((verdict.num_accepted[sampled] >= 1).sum())
    assert stats.binomtest(accepted_first, int(sampled.sum()), p[0, drafts[0, 0]]).pvalue > ALPHA
    first = torch.where(verdict.num_accepted > 0, drafts[:, 0], verdict.next_token)[sampled]  # [N/2]
    counts = np.bincount(first.numpy(), minlength=V)
    assert stats.chisquare(counts, p[0] * counts.sum()).pvalue > ALPHA
