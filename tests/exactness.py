"""Goodness-of-fit machinery: the exact distribution of short continuations, and a chi-square test.

With a tiny vocabulary every continuation of L tokens can be enumerated, so a method's
emitted sequences can be compared with the target's exact sequence distribution.
"""

from __future__ import annotations

import itertools
from collections import Counter

import numpy as np
import torch
from scipy import stats

from ssdbench.sampling.params import RowSampling, SamplingParams
from ssdbench.sampling.probs import logits_to_probs

ALPHA = 1e-3  # reject exactness below this p-value; runs are seeded, so results are reproducible


def exact_sequence_distribution(target, prompt: list[int], length: int, *, temperature: float, top_p: float = 1.0) -> dict:
    """P(x_1..x_L | prompt) under the target's sampling distribution, for every sequence."""
    vocab = target.vocab_size
    prefixes = list(itertools.product(range(vocab), repeat=length - 1))
    rows = [prompt + list(prefix) for prefix in prefixes]  # all the same length
    target.allocate(len(rows), len(rows[0]) + 1)
    tokens = torch.tensor(rows, dtype=torch.int64)  # [N, T]
    positions = torch.arange(tokens.shape[1]).expand_as(tokens)  # [N, T]
    logits = target.forward(tokens, positions)[:, len(prompt) - 1 :]  # [N, L, V]
    sampling = RowSampling.from_params([SamplingParams(temperature=temperature, top_p=top_p)] * len(rows))
    probs = logits_to_probs(logits, sampling)  # [N, L, V]
    exact = {}
    for n, prefix in enumerate(prefixes):
        head = 1.0
        for i, token in enumerate(prefix):
            head *= float(probs[n, i, token])
        for last in range(vocab):
            exact[prefix + (last,)] = head * float(probs[n, length - 1, last])
    return exact


def chi_square_pvalue(counts: Counter, exact: dict, *, min_expected: float = 5.0) -> float:
    """Pearson's test of observed sequence counts against exact probabilities (small bins pooled)."""
    total = sum(counts.values())
    assert set(counts) <= {k for k, p in exact.items() if p > 0}, "a sequence of probability 0 was emitted"
    observed, expected, pool_obs, pool_exp = [], [], 0, 0.0
    for seq, prob in sorted(exact.items(), key=lambda kv: -kv[1]):
        if prob * total >= min_expected:
            observed.append(counts.get(seq, 0))
            expected.append(prob * total)
        else:
            pool_obs += counts.get(seq, 0)
            pool_exp += prob * total
    if pool_exp > 0:
        observed.append(pool_obs)
        expected.append(pool_exp)
    expected_arr = np.array(expected) * total / sum(expected)  # guard float drift
    return float(stats.chisquare(np.array(observed), expected_arr).pvalue)
