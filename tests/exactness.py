"""Goodness-of-fit machinery: the exact distribution of short continuations, and a chi-square test.

With a tiny vocabulary every continuation of L tokens can be enumerated, so a method's
emitted sequences can be compared with the target's exact sequence distribution. The exact
distribution is computed here from the target's logits alone, in float64 numpy, with no
use of the project's sampling code (`ssdbench.sampling`), so a bug there cannot hide itself.

False rejections: every test compares a p-value with ALPHA, so an exact method fails a
given seeded test with probability ALPHA (1 in 1000); the seeds are fixed, so a passing
test keeps passing.
"""

from __future__ import annotations

import itertools
from collections import Counter

import numpy as np
import torch
from scipy import stats

ALPHA = 1e-3  # reject exactness below this p-value; runs are seeded, so results are reproducible


def reference_probs(logits: np.ndarray, *, temperature: float, top_p: float = 1.0) -> np.ndarray:
    """The target's sampling distribution over the last axis, from scratch (float64).

    Temperature 0 is a one-hot at the argmax; top-p keeps the most likely tokens, in order,
    while the mass before each is below top_p (always at least one).
    """
    logits = np.asarray(logits, dtype=np.float64)
    if temperature == 0:
        return np.eye(logits.shape[-1])[logits.argmax(axis=-1)]
    scaled = logits / temperature
    weights = np.exp(scaled - scaled.max(axis=-1, keepdims=True))
    probs = weights / weights.sum(axis=-1, keepdims=True)
    if top_p >= 1.0:
        return probs
    order = np.argsort(-probs, axis=-1, kind="stable")
    ranked = np.take_along_axis(probs, order, axis=-1)
    keep_ranked = (np.cumsum(ranked, axis=-1) - ranked) < top_p
    keep = np.zeros_like(keep_ranked)
    np.put_along_axis(keep, order, keep_ranked, axis=-1)
    kept = np.where(keep, probs, 0.0)
    return kept / kept.sum(axis=-1, keepdims=True)


def exact_sequence_distribution(target, prompt: list[int], length: int, *, temperature: float,
                                top_p: float = 1.0) -> dict[tuple[int, ...], float]:
    """P(x_1..x_L | prompt) under the target's sampling distribution, for every sequence."""
    vocab = target.vocab_size
    prefixes = list(itertools.product(range(vocab), repeat=length - 1))
    rows = [prompt + list(prefix) for prefix in prefixes]  # all the same length
    target.allocate(len(rows), len(rows[0]) + 1)
    tokens = torch.tensor(rows, dtype=torch.int64)  # [N, T]
    positions = torch.arange(tokens.shape[1]).expand_as(tokens)  # [N, T]
    with torch.no_grad():
        logits = target.forward(tokens, positions)[:, len(prompt) - 1:]  # [N, L, V]
    probs = reference_probs(logits.double().numpy(), temperature=temperature, top_p=top_p)  # [N, L, V]
    exact = {}
    for n, prefix in enumerate(prefixes):
        head = float(np.prod([probs[n, i, token] for i, token in enumerate(prefix)]))
        for last in range(vocab):
            exact[prefix + (last,)] = head * float(probs[n, length - 1, last])
    return exact


def chi_square_pvalue(counts: Counter, exact: dict, *, min_expected: float = 5.0) -> float:
    """Pearson's test of observed sequence counts against exact probabilities (small bins pooled)."""
    return chi_square_test(counts, exact, min_expected=min_expected)[2]


def chi_square_test(counts: Counter, exact: dict, *, min_expected: float = 5.0) -> tuple[float, int, float]:
    """(statistic, degrees of freedom, p-value); bins expecting fewer than `min_expected` are pooled.

    A sequence of probability 0 that was emitted is an outright failure: p-value 0.
    """
    total = sum(counts.values())
    if not set(counts) <= {k for k, p in exact.items() if p > 0}:
        return float("inf"), 0, 0.0
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
    result = stats.chisquare(np.array(observed), expected_arr)
    return float(result.statistic), len(observed) - 1, float(result.pvalue)
