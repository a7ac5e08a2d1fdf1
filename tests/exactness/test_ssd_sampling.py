"""Sampled `ssd` emits exactly the target's distribution on every path: hits, misses under each
backup, Saguaro C < 1, a different draft temperature, and mixed greedy and sampled rows.

As in test_sd_sampling, each sample is K + 2 tokens long, so the bonus after K accepted
drafts is part of every checked sequence.
"""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from biased_rules import argmax_matching, uniform_bonus
from decode_helpers import cut_trees_short, decode, ssd_local
from exactness import ALPHA, chi_square_pvalue, exact_sequence_distribution
from test_sd_sampling import PROMPT, VOCAB, assert_every_path_ran, length_for
from tiny_models import tiny_pair

K = 3
LENGTH = length_for(K)
ROWS, BATCHES = 400, 10  # 4000 samples
HITS_ONLY = ",".join([str(VOCAB)] * (K + 1))  # every outcome (k, t) is in the cache
MISSES_MOSTLY = "0,0,0,1"  # only "all accepted" is speculated, on one candidate

pytestmark = pytest.mark.usefixtures("one_thread")
# Samples each biased rule needs to be rejected: argmax matching is gross (p = 0 at 1200 samples); a
# uniform bonus after K = 3 accepted drafts is subtler (p ~ 0.04 at 1200, ~ 1e-18 at 4000).
POWER_BATCHES = {argmax_matching: 3, uniform_bonus: BATCHES}


@pytest.fixture(scope="module")
def pair():
    return tiny_pair(vocab=VOCAB, seed=3, draft="noisy", head_scale=8.0, noise=0.5)


def sample_ssd(target, draft, *, temperature, fan_out_list, miss_list=None, backup="jit", saguaro_c=1.0, draft_temperature=None,
               row_temperatures=None, verify=None, batches=BATCHES, cut_after=None):
    counts: Counter = Counter()
    greedy_outputs, all_steps = [], []
    temps = row_temperatures or [temperature] * ROWS
    draft_temps = [t if draft_temperature is None else draft_temperature for t in temps]
    for b in range(batches):
        generator = torch.Generator().manual_seed(7000 + b)
        proposer = ssd_local(draft, k=K, num_rows=ROWS, fan_out_list=fan_out_list, miss_list=miss_list, backup=backup,
                             saguaro_c=saguaro_c, draft_temperature=draft_temps, generator=torch.Generator().manual_seed(b))
        if cut_after is not None:
            cut_trees_short(proposer, cut_after)
        kwargs = {"verify": verify} if verify else {}
        batch, steps = decode(target, proposer, [PROMPT] * ROWS, max_new_tokens=LENGTH, k=K, temperature=temps,
                              generator=generator, **kwargs)
        for row, t in zip(batch.rows, temps):
            (counts.update([tuple(row.output_ids)]) if t > 0 else greedy_outputs.append(tuple(row.output_ids)))
        all_steps.extend(steps)
    return counts, greedy_outputs, all_steps


def _share(steps, flag):
    return sum(1 for s in steps if s.extras["cache_hit"] is flag) / len(steps)


CASES = {
    "hits": dict(fan_out_list=HITS_ONLY, miss_list=HITS_ONLY, temperature=1.0),
    "misses-jit": dict(fan_out_list=MISSES_MOSTLY, miss_list=MISSES_MOSTLY, backup="jit", temperature=1.0),
    "misses-fast": dict(fan_out_list=MISSES_MOSTLY, miss_list=MISSES_MOSTLY, backup="fast", temperature=1.0),
    "misses-auto": dict(fan_out_list=MISSES_MOSTLY, miss_list=MISSES_MOSTLY, backup="auto", temperature=0.7),
    "saguaro-c0.3": dict(fan_out_list="2,2,1,1", saguaro_c=0.3, temperature=1.0),
    "draft-temperature-0.5": dict(fan_out_list="2,2,1,1", draft_temperature=0.5, temperature=1.0),
    "greedy-draft": dict(fan_out_list="2,2,1,1", draft_temperature=0.0, temperature=0.8),
    "hits-topped-up": dict(fan_out_list=HITS_ONLY, miss_list=HITS_ONLY, temperature=1.0, cut_after=1),
}


@pytest.mark.parametrize("case", list(CASES))
def test_ssd_sampling_matches_target_distribution(pair, case):
    target, draft = pair
    params = CASES[case]
    exact = exact_sequence_distribution(target, PROMPT, LENGTH, temperature=params["temperature"])
    counts, _, steps = sample_ssd(target, draft, **params)
    if case.startswith("hits"):
        assert _share(steps, True) == 1.0
    if case == "hits-topped-up":  # every tree stopped after one step; every hit still proposed K
        assert all(s.extras["cache_hit"] and s.proposed == K for s in steps if s.proposed)
    if case.startswith("misses"):
        assert _share(steps, False) > 0.5
    assert_every_path_ran(steps, K)
    assert chi_square_pvalue(counts, exact) > ALPHA


def test_mixed_greedy_and_sampled_rows(pair):
    target, draft = pair
    temps = [0.0 if i % 2 else 1.0 for i in range(ROWS)]
    exact = exact_sequence_distribution(target, PROMPT, LENGTH, temperature=1.0)
    counts, greedy, steps = sample_ssd(target, draft, temperature=1.0, fan_out_list="2,2,1,1", row_temperatures=temps)
    ar = decode(target, None, [PROMPT], max_new_tokens=LENGTH, k=0)[0].rows[0].output_ids
    assert set(greedy) == {tuple(ar)}
    assert _share(steps, True) > 0 and _share(steps, False) > 0
    assert chi_square_pvalue(counts, exact) > ALPHA


@pytest.mark.parametrize("rule", [argmax_matching, uniform_bonus])
@pytest.mark.parametrize("fan_out_list", [HITS_ONLY, MISSES_MOSTLY])
def test_goodness_of_fit_rejects_biased_rules_in_ssd(pair, fan_out_list, rule):
    target, draft = pair
    exact = exact_sequence_distribution(target, PROMPT, LENGTH, temperature=1.0)
    counts, _, _ = sample_ssd(target, draft, temperature=1.0, fan_out_list=fan_out_list, miss_list=fan_out_list,
                              verify=rule, batches=POWER_BATCHES[rule])
    assert chi_square_pvalue(counts, exact) < ALPHA


@pytest.fixture(scope="module", params=["int8_fbgemm", "int8_tiles"])
def engine_pair(request):
    """The pair's target, and its noisy copy in int8 on one many-rows kernel for every row count:
    - int8_fbgemm, torch's quantized engine: each step quantises its activations with one scale for all
      of its rows, so a branch's draft distribution depends on the branches beside it in the tree step;
    - int8_tiles (AMX), run by the fused step: tree steps of many rows through kernels/decode_layer.c.
    What ssd emits must not change."""
    from ssdbench.models.int8.select import INT8_CANDIDATES, _int8_unavailable_reason
    from ssdbench.models.build import build_native_model
    from tiny_models import native, perturbed, tiny_llama_config, tiny_state_dict

    kernel = request.param
    if (reason := _int8_unavailable_reason(kernel, "cpu", ())) is not None:
        pytest.skip(f"{kernel} cannot run here: {reason}")
    config = tiny_llama_config(vocab=VOCAB)
    state = tiny_state_dict(config, seed=3, head_scale=8.0)
    draft = build_native_model(config, perturbed(state, scale=0.5, seed=103), weights="int8",
                               disabled_kernels=frozenset(INT8_CANDIDATES) - {kernel})
    assert draft.describe()["kernels"]["linear"] == kernel
    assert (draft.fused is not None) == (kernel == "int8_tiles")
    return native(config, state), draft


@pytest.mark.parametrize("case", ["hits", "misses-jit"])
def test_ssd_stays_exact_with_a_many_rows_int8_draft(engine_pair, case):
    target, draft = engine_pair
    params = CASES[case]
    exact = exact_sequence_distribution(target, PROMPT, LENGTH, temperature=params["temperature"])
    counts, _, steps = sample_ssd(target, draft, **params)
    assert_every_path_ran(steps, K)
    assert chi_square_pvalue(counts, exact) > ALPHA
