"""Sampled `sd` emits exactly the target's distribution, and the test has the power to see bias.

Every sample decodes K + 2 tokens: the prefill's token, then one whole round of K drafts and
the bonus drawn after them, so the bonus that follows K accepted drafts is checked too. A
3-token vocabulary keeps the enumeration of all continuations small (3^(K+2) sequences).
"""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from biased_rules import argmax_matching, uniform_bonus
from decode_helpers import decode, make_proposer
from exactness import ALPHA, chi_square_pvalue, exact_sequence_distribution
from ssdbench.sampling.accept import verify_proposal
from tiny_models import tiny_pair

VOCAB = 3
PROMPT = [1, 2, 0, 1, 2, 0, 1, 2]  # repeats, so n-gram lookup has something to propose
ROWS, BATCHES = 400, 10  # 4000 samples

pytestmark = pytest.mark.usefixtures("one_thread")


def length_for(k: int) -> int:
    """New tokens per sample: the prefill's token, K drafts and the bonus after them."""
    return k + 2


@pytest.fixture(scope="module")
def pair():
    return tiny_pair(vocab=VOCAB, seed=3, draft="noisy", head_scale=8.0, noise=0.5)


def sample_counts(target, draft, kind, *, k, temperature, top_p=1.0, draft_temperature=None, verify=verify_proposal,
                  seed=0, length=None):
    counts: Counter = Counter()
    all_steps = []
    for b in range(BATCHES):
        generator = torch.Generator().manual_seed(seed * 1000 + b)
        proposer = make_proposer(kind, draft, k=k, num_rows=ROWS, generator=generator, top_p=top_p,
                                 draft_temperature=temperature if draft_temperature is None else draft_temperature)
        batch, steps = decode(target, proposer, [PROMPT] * ROWS, max_new_tokens=length or length_for(k), k=k,
                              temperature=temperature, top_p=top_p, generator=generator, verify=verify)
        counts.update(tuple(row.output_ids) for row in batch.rows)
        all_steps.extend(steps)
    return counts, all_steps


def assert_every_path_ran(steps, k: int) -> None:
    """Rejections, acceptances, and whole rounds of K accepted drafts whose bonus was emitted."""
    assert any(s.proposed > s.accepted for s in steps)
    assert any(s.proposed == s.accepted == k and s.emitted == k + 1 for s in steps)


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
    exact = exact_sequence_distribution(target, PROMPT, length_for(params["k"]), temperature=params["temperature"],
                                        top_p=params.get("top_p", 1.0))
    counts, steps = sample_counts(target, draft, **params)
    assert_every_path_ran(steps, params["k"])
    assert chi_square_pvalue(counts, exact) > ALPHA


@pytest.mark.parametrize("kind,rule", [("model", argmax_matching), ("ngram", argmax_matching),
                                       ("model", uniform_bonus), ("ngram", uniform_bonus)])
def test_goodness_of_fit_rejects_biased_rules(pair, kind, rule):
    """The same test, fed a rule biased toward the argmax or a uniformly drawn bonus, rejects it."""
    target, draft = pair
    exact = exact_sequence_distribution(target, PROMPT, length_for(2), temperature=1.0)
    counts, _ = sample_counts(target, draft, kind, k=2, temperature=1.0, verify=rule)
    assert chi_square_pvalue(counts, exact) < ALPHA


def test_ar_sampling_matches_target_distribution(pair):
    target, _ = pair
    exact = exact_sequence_distribution(target, PROMPT, 4, temperature=1.0)
    counts, _ = sample_counts(target, None, "ar", k=0, temperature=1.0, length=4)
    assert chi_square_pvalue(counts, exact) > ALPHA
