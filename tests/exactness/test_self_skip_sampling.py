"""Sampled sd and ssd with the self-skip draft emit exactly the target's distribution (the same
chi-square machinery as every other draft), and the check rejects a biased rule with this draft."""

from __future__ import annotations

import pytest
from biased_rules import argmax_matching
from exactness import ALPHA, chi_square_pvalue, exact_sequence_distribution
from test_sd_sampling import PROMPT, VOCAB, assert_every_path_ran, length_for, sample_counts
from test_ssd_sampling import HITS_ONLY, K, LENGTH, MISSES_MOSTLY, sample_ssd
from tiny_models import native, tiny_llama_config, tiny_state_dict

from ssdbench.models.self_skip import skipping_view

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def target_and_skip():
    config = tiny_llama_config(vocab=VOCAB, layers=4)
    target = native(config, tiny_state_dict(config, seed=3, head_scale=8.0))
    return target, skipping_view(target, (1, 2))


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_sd_with_the_self_skip_draft_matches_the_target(target_and_skip, temperature):
    target, draft = target_and_skip
    exact = exact_sequence_distribution(target, PROMPT, length_for(2), temperature=temperature)
    counts, steps = sample_counts(target, draft, "model", k=2, temperature=temperature)
    assert_every_path_ran(steps, 2)
    assert chi_square_pvalue(counts, exact) > ALPHA


@pytest.mark.parametrize("fan_out", [HITS_ONLY, MISSES_MOSTLY])
def test_ssd_with_the_self_skip_draft_matches_the_target(target_and_skip, fan_out):
    target, draft = target_and_skip
    exact = exact_sequence_distribution(target, PROMPT, LENGTH, temperature=1.0)
    counts, _, steps = sample_ssd(target, draft, temperature=1.0, fan_out_list=fan_out, miss_list=fan_out)
    assert_every_path_ran(steps, K)
    assert chi_square_pvalue(counts, exact) > ALPHA


def test_the_check_rejects_a_biased_rule_with_the_self_skip_draft(target_and_skip):
    target, draft = target_and_skip
    exact = exact_sequence_distribution(target, PROMPT, length_for(2), temperature=1.0)
    counts, _ = sample_counts(target, draft, "model", k=2, temperature=1.0, verify=argmax_matching)
    assert chi_square_pvalue(counts, exact) < ALPHA
