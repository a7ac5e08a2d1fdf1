"""Tree attention equals the draft run alone on each branch's context; KV caches stay consistent."""

from __future__ import annotations

import pytest
import torch

from decode_helpers import cut_trees_short, decode, sampling_rows, ssd_local
from tiny_models import tiny_pair
from ssdbench.speculation.fan_out import build_fan_out
from ssdbench.speculation.speculator import Speculator

PROMPTS = [[1, 5, 9, 1, 5], [3, 3, 8, 2, 2, 7, 9]]


def chain_logits(model, tokens: list[int]) -> torch.Tensor:
    """The model alone on one context, as a plain chain: logits [T, V]."""
    model.allocate(1, len(tokens) + 1)
    ids = torch.tensor([tokens])  # [1, T]
    return model.forward(ids, torch.arange(len(tokens)).unsqueeze(0))[0]


def test_each_branch_matches_the_draft_alone_on_its_context():
    _, draft = tiny_pair(vocab=48, seed=1, draft="noisy")
    k = 3
    policy = build_fan_out("3", k=k, fan_out_list=None, miss_list="3,3,3,3")
    spec = Speculator(draft, k=k, fan_out=policy, backup="jit", generator=torch.Generator().manual_seed(0))
    spec.start_batch(PROMPTS, sampling_rows(2, 1.0), max_len=64)  # sampled: the cache keeps each q row
    spec.build()
    answer = spec.answer([(True, 0, 7), (True, 0, 11)])  # first round: outcome is the first token
    spec.build()  # glue over [t, proposal], fork, tree: the cache now holds the next round's branches
    checked = 0
    for b, row in enumerate(spec.rows):
        proposal = answer.tokens[b, : answer.depth[b]].tolist()
        for (accepted, bonus), cached in list(spec.cache._rows[b].items()):
            context = row.history + proposal[:accepted] + [bonus] + cached.tokens[:-1]
            expected = torch.softmax(chain_logits(draft, context)[-cached.depth :], dim=-1)  # [d, V]
            assert torch.allclose(cached.q, expected, atol=1e-5), (b, accepted, bonus)
            checked += 1
    assert checked >= 8 and {a for a, _ in spec.cache._rows[0]} == {0, 1, 2, 3}


def fresh_prefill_kv(model, tokens: list[int]):
    model.allocate(1, len(tokens) + 1)
    model.forward(torch.tensor([tokens]), torch.arange(len(tokens)).unsqueeze(0))
    return model.cache.k[:, 0, :, : len(tokens)].clone(), model.cache.v[:, 0, :, : len(tokens)].clone()


def test_kv_caches_equal_a_fresh_prefill_after_hits_and_misses():
    target, draft = tiny_pair(vocab=48, seed=1, draft="noisy")
    proposer = ssd_local(draft, k=3, num_rows=2, fan_out="2", backup="jit")
    batch, steps = decode(target, proposer, PROMPTS, max_new_tokens=20, k=3)
    assert any(s.extras["cache_hit"] for s in steps) and any(s.extras["cache_hit"] is False for s in steps)
    spec = proposer.speculator
    target_k, target_v = target.cache.k.clone(), target.cache.v.clone()
    draft_k, draft_v = draft.cache.k.clone(), draft.cache.v.clone()
    for b, row in enumerate(batch.rows):
        committed = row.tokens[:-1]  # the pending token has no K/V yet
        k_ref, v_ref = fresh_prefill_kv(target, committed)
        n = len(committed)
        assert torch.allclose(target_k[:, b, :, :n], k_ref, atol=1e-5)
        assert torch.allclose(target_v[:, b, :, :n], v_ref, atol=1e-5)
        draft_committed = spec.rows[b].history[:-1]
        assert draft_committed == committed[: len(draft_committed)]
        k_ref, v_ref = fresh_prefill_kv(draft, draft_committed)
        m = len(draft_committed)
        assert m >= len(committed) - 4  # the draft's main line trails by at most one round
        assert torch.allclose(draft_k[:, b, :, :m], k_ref, atol=1e-5)
        assert torch.allclose(draft_v[:, b, :, :m], v_ref, atol=1e-5)


class AlternatingModes:
    """Stands in for `auto`'s measured choice: two builds with a tree, two without, and so on."""

    def __init__(self) -> None:
        self.builds = 0

    @property
    def mode(self) -> str:  # the first build (after prefill) is sync: the prompt's glue must not go stale
        self.builds += 1
        return "tree" if (self.builds // 2) % 2 else "sync"

    def note(self, tokens, period_ms) -> None:
        pass


def test_switching_between_tree_and_sync_modes_stays_exact_and_consistent():
    target, draft = tiny_pair(vocab=48, seed=1, draft="noisy")
    ar, _ = decode(target, None, PROMPTS, max_new_tokens=24, k=0)
    proposer = ssd_local(draft, k=3, num_rows=2, fan_out="2", backup="jit")
    proposer.speculator.chooser = AlternatingModes()
    batch, steps = decode(target, proposer, PROMPTS, max_new_tokens=24, k=3)
    assert [r.output_ids for r in batch.rows] == [r.output_ids for r in ar.rows]
    assert any(s.extras["cache_hit"] for s in steps) and any(s.extras["fan_out_total"] == 0 for s in steps)  # both modes ran
    draft_k = draft.cache.k.clone()
    for b, row in enumerate(proposer.speculator.rows):
        valid = row.main_valid
        assert valid >= len(row.history) - 4
        k_ref, _ = fresh_prefill_kv(draft, row.history[:valid])
        assert torch.allclose(draft_k[:, b, :, :valid], k_ref, atol=1e-5)



@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=[
    pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")])])
def test_q_rows_stay_on_the_drafts_device(device):
    """The q-rows a draft answers with stay on its device (on a GPU they never pass through host
    memory): the tree keeps them there, the cache holds views of them, the answer hands them on."""
    from tiny_models import perturbed, tiny_llama_config, tiny_state_dict
    from ssdbench.models.build import build_native_model

    config = tiny_llama_config(vocab=48)
    draft = build_native_model(config, perturbed(tiny_state_dict(config, seed=1), scale=0.5, seed=101), device=device)
    k = 3
    spec = Speculator(draft, k=k, fan_out=build_fan_out("2", k=k, fan_out_list=None, miss_list=None),
                      backup="jit", generator=torch.Generator(device=device).manual_seed(0))
    spec.start_batch(PROMPTS, sampling_rows(2, 1.0), max_len=64)  # sampled: every answer carries q
    spec.build()
    uncached = [min(set(range(48)) - set(spec.cache.bonuses(b, 0))) for b in range(2)]
    answers = [spec.answer([(True, 0, t) for t in uncached])]  # a first token no branch holds: jit backups
    spec.build()
    answers.append(spec.answer([(True, 0, spec.cache.bonuses(b, 0)[0]) for b in range(2)]))  # cached branches: hits
    assert answers[0].hit == [False, False] and answers[1].hit == [True, True]
    for answer in answers:
        assert answer.q.device.type == device and answer.tokens.device.type == "cpu"
        for b, d in enumerate(answer.depth):  # each q-row a distribution that gave its token mass
            torch.testing.assert_close(answer.q[b, :d].sum(-1).cpu(), torch.ones(d))
            assert (answer.q[b, torch.arange(d), answer.tokens[b, :d].to(device)] > 0).all()


@pytest.mark.parametrize("cut_after", [1, 2])
def test_a_hit_cut_short_still_proposes_k_tokens_and_stays_exact(cut_after):
    """The request arrived after `cut_after` of K tree steps: the hit branch grows to K before the answer,
    greedy outputs stay ar's, and the draft's main line stays what a fresh prefill would give."""
    target, draft = tiny_pair(vocab=48, seed=1, draft="noisy")
    ar, _ = decode(target, None, PROMPTS, max_new_tokens=24, k=0)
    proposer = cut_trees_short(ssd_local(draft, k=3, num_rows=2, fan_out="2", backup="jit"), cut_after)
    batch, steps = decode(target, proposer, PROMPTS, max_new_tokens=24, k=3)
    assert [r.output_ids for r in batch.rows] == [r.output_ids for r in ar.rows]
    hits = [(answer.depth[b], answer.hit[b]) for answer in proposer.history for b in range(2) if answer.hit[b]]
    assert hits and all(depth == 3 for depth, _ in hits)
    draft_k = draft.cache.k.clone()
    for b, row in enumerate(proposer.speculator.rows):
        valid = row.main_valid
        assert valid >= len(row.history) - 4
        k_ref, _ = fresh_prefill_kv(draft, row.history[:valid])
        assert torch.allclose(draft_k[:, b, :, :valid], k_ref, atol=1e-5)
