"""Sampled `sd` emits exactly the target's distribution, and the test has the power to see bias."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from decode_helpers import decode, make_proposer
from exactness import ALPHA, chi_square_pvalue, exact_sequence_distribution
from ssdbench.sampling.accept import Verdict, verify_proposal
from tiny_models import tiny_pair

VOCAB = 5
LENGTH = 3  # new tokens per sample: 5^3 = 125 sequences
PROMPT = [1, 2, 3, 1, 2, 3, 1, 2]  # repeats, so n-gram lookup has something to propose
ROWS, BATCHES = 200, 20  # 4000 samples


@pytest.fixture(scope="module")
def pair():
    return tiny_pair(vocab=VOCAB, seed=3, draft="noisy", head_scale=1.5, noise=0.8)


def sample_counts(target, draft, kind, *, k, temperature, top_p=1.0, draft_temperature=None, verify=verify_proposal, seed=0):
    counts: Counter = Counter()
    for b in range(BATCHES):
        generator = torch.Generator().manual_seed(seed * 1000 + b)
        proposer = make_proposer(kind, draft, k=k, num_rows=ROWS, generator=generator, top_p=top_p,
                                 draft_temperature=temperature if draft_temperature is None else draft_temperature)
        batch, steps = decode(target, proposer, [PROMPT] * ROWS, max_new_tokens=LENGTH, k=k, temperature=temperature,
                              top_p=top_p, generator=generator, verify=verify)
        counts.update(tuple(row.output_ids) for row in batch.rows)
    return counts, steps


CASES = {
    "model-draft-t1": dict(kind="model", k=2, temperature=1.0),
    "model-draft-t0.7": dict(kind="model", k=3, temperature=0.7),
    "model-draft-top-p": dict(kind="model", k=2, temperature=1.0, top_p=0.8),
    "draft-temperature-differs": dict(kind="model", k=2, temperature=1.0, draft_temperature=0.5),
    "greedy-draft-sampled-target": dict(kind="model", k=2, temperature=0.8, draft_temperature=0.0),
    "ngram-t1": dict(kind="ngram", k=2, temperature=1.0),
    "ngram-t0.7": dict(kind="ngram", k=3, temperature=0.7),
}


@pytest.mark.parametrize("case", list(CASES))
def test_sd_sampling_matches_target_distribution(pair, case):
    target, draft = pair
    params = CASES[case]
    exact = exact_sequence_distribution(target, PROMPT, LENGTH, temperature=params["temperature"], top_p=params.get("top_p", 1.0))
    counts, steps = sample_counts(target, draft, **params)
    assert sum(s.accepted for s in steps) > 0 and sum(s.proposed - s.accepted for s in steps) > 0  # both paths ran
    assert chi_square_pvalue(counts, exact) > ALPHA


def argmax_matching(target_logits, draft_tokens, draft_q, num_proposed, sampling, generator) -> Verdict:
    """The reference engine's bias: under sampling, accept a draft iff it is the target's argmax."""
    greedy_like = verify_proposal(target_logits, draft_tokens, None, num_proposed,
                                  type(sampling)(sampling.temperature * 0, sampling.top_p, sampling.top_k), generator)
    n = greedy_like.num_accepted
    from ssdbench.sampling.probs import logits_to_probs, sample_from

    p = logits_to_probs(target_logits, sampling)  # [B, K+1, V]
    next_token = sample_from(p[torch.arange(p.shape[0]), n], generator)
    return Verdict(num_accepted=n, next_token=next_token)


@pytest.mark.parametrize("kind", ["model", "ngram"])
def test_goodness_of_fit_rejects_argmax_matching(pair, kind):
    target, draft = pair
    exact = exact_sequence_distribution(target, PROMPT, LENGTH, temperature=1.0)
    counts, _ = sample_counts(target, draft, kind, k=2, temperature=1.0, verify=argmax_matching)
    assert chi_square_pvalue(counts, exact) < ALPHA


def test_ar_sampling_matches_target_distribution(pair):
    target, _ = pair
    exact = exact_sequence_distribution(target, PROMPT, LENGTH, temperature=1.0)
    counts, _ = sample_counts(target, None, "ar", k=0, temperature=1.0)
    assert chi_square_pvalue(counts, exact) > ALPHA
