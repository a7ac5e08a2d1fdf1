"""Memory and context planning against published model shapes (DESIGN.md 4.7), nothing loaded."""

from __future__ import annotations

import pytest

from ssdbench.decoding.batch import new_batch
from ssdbench.models import memory_plan as mp
from ssdbench.models.shape import known_shape

GB = 10**9


def test_llama_70b_bf16_weights_do_not_fit_an_80gb_gpu_but_fit_141gb_free():
    shape = known_shape("llama-3.1-70b")
    assert 140 * GB < mp.weight_bytes(shape, itemsize=2) < 142 * GB
    lengths = mp.Lengths(batch_size=1, prompt_tokens=512, max_new_tokens=512, k=0)
    need = mp.role_need("target", "cuda:0", shape, lengths, itemsize=2)
    assert mp.shortfall([need], lambda device: 80 * GB)[0] == "cuda:0"
    assert mp.shortfall([need], lambda device: 150 * GB) is None


def test_kv_cache_per_token_matches_the_published_shapes():
    """Llama-3.1-8B bf16: 2 (K,V) x 32 layers x 8 KV heads x 128 dims x 2 bytes = 128 KiB per token."""
    for name, per_token in (("llama-3.1-8b", 128 * 1024), ("llama-3.2-1b", 32 * 1024), ("qwen3-32b", 256 * 1024)):
        shape = known_shape(name)
        one, two = (mp.kv_cache_bytes(shape, batch_size=1, num_slots=n, itemsize=2) for n in (1000, 2000))
        rope = 2 * shape.head_dim * 2  # cos and sin rows of the slot
        assert two - one == 1000 * (per_token + rope)
        assert mp.kv_cache_bytes(shape, batch_size=4, num_slots=1000, itemsize=2) == 4 * one - 3 * 1000 * rope


def test_a_cpu_float32_cache_counts_the_key_blocks_the_fused_step_keeps():
    """The keys once more: 3 of K, V, K per slot where 2 were, on the CPU in float32 only."""
    shape, lengths = known_shape("llama-3.2-1b"), mp.Lengths(batch_size=1, prompt_tokens=100, max_new_tokens=100, k=4)
    plain = mp.kv_cache_bytes(shape, batch_size=1, num_slots=1000, itemsize=4)
    blocked = mp.kv_cache_bytes(shape, batch_size=1, num_slots=1000, itemsize=4, key_blocks=True)
    rope = 2 * shape.head_dim * 4 * 1000
    assert (blocked - rope) * 2 == (plain - rope) * 3
    cpu, gpu = (mp.role_need("target", device, shape, lengths, itemsize=4) for device in ("cpu", "cuda:0"))
    assert cpu.kv_cache > gpu.kv_cache


def test_prefill_logits_dominate_activations_for_a_long_prompt():
    """fp32 logits [B, T, V] for an 8192-token prompt on a 128k vocabulary are 4.2 GB by themselves."""
    shape = known_shape("llama-3.1-8b")
    acts = mp.activation_bytes(shape, batch_size=1, num_tokens=8192, span=8192, itemsize=2)
    assert acts > 8192 * 128256 * 4


def test_slots_match_what_the_batch_and_the_speculator_allocate():
    batch = new_batch([[1] * 37, [2] * 50], max_new_tokens=64, eos_ids=frozenset(), k=5)
    assert mp.Lengths(2, 50, 64, 5).num_slots == batch.max_len
    import torch

    from decode_helpers import sampling_rows
    from ssdbench.speculation.fan_out import build_fan_out
    from ssdbench.speculation.speculator import Speculator
    from tiny_models import tiny_pair

    fan_out = build_fan_out("3", k=5, fan_out_list=None, miss_list=None)  # a budget of 18 branches
    _, draft = tiny_pair(vocab=48)
    speculator = Speculator(draft, k=5, fan_out=fan_out, backup="jit", generator=torch.Generator())
    speculator.start_batch([[1] * 37, [2] * 50], sampling_rows(2, 0.0), max_len=batch.max_len)
    tree = mp.Lengths(2, 50, 64, 5, tree_tokens=fan_out.budget * 5)
    assert tree.num_slots == speculator.max_len == draft.cache.max_len


def test_every_batch_of_a_run_allocates_the_planned_capacity():
    """One capacity per run (CUDA graphs outlive batches): the longest prompt's slots, K included, for
    every batch and method, which is what the memory plan reserves."""
    from ssdbench.decoding.workload import DecodeSettings, Workload

    workload = Workload(suite="s", prompt_ids=("a", "b"), token_ids=((1,) * 37, (2,) * 50), eos_ids=frozenset())
    decode = DecodeSettings(k=5, max_new_tokens=64)
    capacity = decode.cache_capacity(workload)
    assert capacity == mp.Lengths(2, 50, 64, 5).num_slots
    for prompts, k in (([[1] * 37], 0), ([[1] * 37], 5), ([[1] * 37, [2] * 50], 5)):
        batch = new_batch(prompts, max_new_tokens=64, eos_ids=frozenset(), k=k, capacity=capacity)
        assert batch.max_len == capacity
    with pytest.raises(ValueError, match="needs"):
        new_batch([[2] * 51], max_new_tokens=64, eos_ids=frozenset(), k=5, capacity=capacity)


def test_cuda_and_cuda_0_are_one_gpu():
    shape = known_shape("llama-3.2-1b")
    lengths = mp.Lengths(1, 10, 10, 4)
    needs = [mp.role_need("target rank 0", "cuda:0", shape, lengths, itemsize=2),
             mp.role_need("draft", "cuda", shape, lengths, itemsize=2)]
    assert list(mp.needs_by_device(needs)) == ["cuda:0"]
    both = sum(n.total for n in needs)
    assert mp.shortfall(needs, lambda d: both - 1) == ("cuda:0", both, both - 1)


@pytest.mark.parametrize("methods,slack", [(("ar",), 0), (("ar", "sd"), 4), (("ar", "sd", "ssd"), 8),
                                           (("hf-assisted",), 4), (("hf-generate",), 0)])
def test_the_plan_reserves_the_drafts_past_the_last_token(methods, slack):
    from ssdbench.run.plan import build_plan
    from ssdbench.run.settings import RunSettings

    assert build_plan(RunSettings(methods=methods, k=4)).draft_slack == slack


def test_int8_self_draft_holds_about_a_quarter_of_fp32_linears():
    shape = known_shape("smollm2-135m")
    fp32, int8 = mp.weight_bytes(shape, itemsize=4), mp.weight_bytes(shape, itemsize=4, is_int8=True)
    assert int8 < fp32 / 2


def test_cpu_roles_share_the_host_and_gpus_are_separate():
    shape = known_shape("llama-3.2-1b")
    lengths = mp.Lengths(1, 10, 10, 4)
    needs = [mp.role_need("target", "cpu", shape, lengths, itemsize=4),
             mp.role_need("ssd draft", "cpu", shape, lengths, itemsize=4),
             mp.role_need("other", "cuda:1", shape, lengths, itemsize=2)]
    grouped = mp.needs_by_device(needs)
    assert sorted(grouped) == ["cpu", "cuda:1"] and len(grouped["cpu"]) == 2
    one_host = sum(n.total for n in grouped["cpu"])
    assert mp.shortfall(needs, lambda d: one_host - 1 if d == "cpu" else 10**15) == ("cpu", one_host, one_host - 1)


def test_largest_fitting_finds_the_boundary():
    assert mp.largest_fitting(lambda n: n <= 777, 10**8) == 777
    assert mp.largest_fitting(lambda n: n <= 777, 500) == 500
    assert mp.largest_fitting(lambda n: False, 10**8) == 0


def test_llama_70b_in_bf16_does_not_fit_one_80gb_gpu_and_fits_four_with_room_for_its_kv_cache():
    from ssdbench.models import memory_plan as mp
    from ssdbench.models.shape import known_shape

    shape, gpu = known_shape("llama-3.1-70b"), 80 * 10**9
    lengths = mp.Lengths(batch_size=1, prompt_tokens=512, max_new_tokens=512, k=0)
    one = mp.tensor_parallel_needs(shape, lengths, devices=["cuda:0"], itemsize=2)
    assert mp.shortfall(one, lambda device: gpu) is not None  # ~141 GB of weights alone
    four = mp.tensor_parallel_needs(shape, lengths, devices=[f"cuda:{i}" for i in range(4)], itemsize=2)
    assert mp.shortfall(four, lambda device: gpu) is None
    assert len(four) == 4 and {n.device for n in four} == {"cuda:0", "cuda:1", "cuda:2", "cuda:3"}
    rank = four[0]
    assert 0.25 * one[0].weights < rank.weights < 0.28 * one[0].weights  # a quarter, plus embedding and lm_head whole
    assert 0.25 * one[0].kv_cache < rank.kv_cache < 0.26 * one[0].kv_cache  # 8 KV heads, 2 per rank (RoPE tables whole)
    room = gpu - rank.total  # what is left per GPU holds a KV cache of ~100k more tokens at batch 1
    per_token = mp.kv_cache_bytes(shape.tensor_parallel_shard(4), batch_size=1, num_slots=1, itemsize=2)
    assert room / per_token > 100_000


def test_a_tp_run_plans_one_need_per_rank(tmp_path):
    from ssdbench.models.shape import known_shape
    from ssdbench.run.limits import role_needs
    from ssdbench.run.plan import build_plan
    from ssdbench.run.settings import RunSettings

    plan = build_plan(RunSettings(target="llama-3.2-1b", random_weights=True, tp=2, methods=("ar", "sd")))
    shape = known_shape("llama-3.2-1b")
    needs = role_needs(plan, (shape, shape), prompt_tokens=32, num_requests=1)
    assert [n.role for n in needs] == ["target rank 0", "target rank 1", "draft"]
    whole = role_needs(build_plan(RunSettings(target="llama-3.2-1b", random_weights=True, methods=("ar", "sd"))),
                       (shape, shape), prompt_tokens=32, num_requests=1)[0]
    assert 0.49 * whole.kv_cache < needs[0].kv_cache < 0.51 * whole.kv_cache  # half the KV heads (RoPE tables whole)
