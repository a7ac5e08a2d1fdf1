"""The native engine against transformers' own forward, and the cache/mask contracts SD and SSD rely on."""

from __future__ import annotations


import pytest
import torch

from ssdbench.errors import UsageError
from ssdbench.models.kv_cache import StaticKVCache
from ssdbench.models.build import build_native_model, build_random_model
from ssdbench.models.shape import KNOWN_SHAPES, ModelShape, known_shape

LLAMA3_ROPE = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 32}
VARIANTS = {
    "llama": ("llama", {}),
    "llama-tied": ("llama", {"tie_word_embeddings": True}),
    "llama3-rope": ("llama", {"rope_scaling": LLAMA3_ROPE, "rope_theta": 500000.0}),
    "llama3-rope-tied": ("llama", {"rope_scaling": LLAMA3_ROPE, "tie_word_embeddings": True}),
    "qwen2-bias": ("qwen2", {}),
    "qwen3-qknorm": ("qwen3", {"head_dim": 24}),
}


def tiny_hf_model(kind: str = "llama", *, seed: int = 0, **extra):
    """A random transformers model of `kind`, with norms and biases moved off their init values."""
    import transformers as tf

    config_cls, model_cls = {"llama": (tf.LlamaConfig, tf.LlamaForCausalLM),
                             "qwen2": (tf.Qwen2Config, tf.Qwen2ForCausalLM),
                             "qwen3": (tf.Qwen3Config, tf.Qwen3ForCausalLM)}[kind]
    shape = {"vocab_size": 97, "hidden_size": 48, "intermediate_size": 80, "num_hidden_layers": 2,
             "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 128}
    config = config_cls(initializer_range=0.08, **(shape | extra))
    torch.manual_seed(seed)
    model = model_cls(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.add_(0.2 * torch.randn_like(p))
    return model


def native_of(hf_model, *, max_len: int = 64, batch_size: int = 1, **kwargs):
    """The native twin of a transformers model, its cache allocated."""
    model = build_native_model(hf_model.config, hf_model.state_dict(), **kwargs)
    model.allocate(batch_size, max_len)
    return model


def chain(n: int, start: int = 0, batch: int = 1) -> torch.Tensor:
    return torch.arange(start, start + n).expand(batch, n)  # [B, n]


def assert_native_matches_hf(hf_model, tokens: torch.Tensor, *, atol: float = 1e-4, chunk: int = 1,
                             **build) -> None:
    """Parity helper (also for real checkpoints such as SmolLM2): full prefill, then prefill of half
    the tokens and `chunk` tokens per step, against transformers' full forward on the same weights."""
    b, t = tokens.shape
    with torch.inference_mode():
        want = hf_model(tokens).logits.float()  # [B, T, V]
    model = native_of(hf_model, max_len=t + 4, batch_size=b, **build)
    torch.testing.assert_close(model.forward(tokens, chain(t, batch=b)), want, atol=atol, rtol=1e-4)
    model.allocate(b, t + 4)
    half = t // 2
    pieces = [model.forward(tokens[:, :half], chain(half, batch=b))]
    for s in range(half, t, chunk):
        e = min(s + chunk, t)
        pieces.append(model.forward(tokens[:, s:e], chain(e - s, s, batch=b)))
    torch.testing.assert_close(torch.cat(pieces, dim=1), want, atol=atol, rtol=1e-4)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_matches_transformers_prefill_and_incremental(variant):
    kind, extra = VARIANTS[variant]
    hf = tiny_hf_model(kind, **extra)
    tokens = torch.randint(0, 97, (2, 40), generator=torch.Generator().manual_seed(1))  # [B, T]
    assert_native_matches_hf(hf, tokens, chunk=1)
    assert_native_matches_hf(hf, tokens, chunk=3)


def test_matmul_linear_kernel_matches_transformers_too():
    hf = tiny_hf_model("qwen2")
    tokens = torch.randint(0, 97, (2, 12), generator=torch.Generator().manual_seed(6))  # [B, T]
    assert_native_matches_hf(hf, tokens, chunk=4, linear_kernel="matmul")
    assert native_of(hf, linear_kernel="matmul").describe()["linear_kernel"] == "matmul"


def test_bf16_model_is_close_to_fp32():
    hf = tiny_hf_model("llama")
    tokens = torch.randint(0, 97, (1, 16), generator=torch.Generator().manual_seed(7))  # [B, T]
    fp32 = native_of(hf).forward(tokens, chain(16))
    bf16 = native_of(hf, dtype=torch.bfloat16).forward(tokens, chain(16))
    assert bf16.dtype == torch.float32
    assert ((bf16 - fp32).abs() / fp32.std()).mean() < 0.03


def test_cache_writes_each_row_at_its_own_slots():
    cache = StaticKVCache(num_layers=2, batch_size=2, num_kv_heads=3, max_len=8, head_dim=4)
    k_new = torch.randn(2, 3, 2, 4)  # [B, Hkv, T, D]
    slots = torch.tensor([[1, 2], [5, 0]])  # [B, T]
    cache.write(1, cache.slot_index(slots), k_new, -k_new)
    k, v = cache.read(1, 8)  # [B, Hkv, S, D]
    torch.testing.assert_close(k[0, :, 1:3], k_new[0])
    torch.testing.assert_close(k[1, :, 5], k_new[1, :, 0])
    torch.testing.assert_close(v[1, :, 0], -k_new[1, :, 1])
    assert k[0, :, [0, 3, 4, 5, 6, 7]].abs().sum() == 0 and cache.k[0].abs().sum() == 0
    cache.copy_slots(1, torch.tensor([5, 0]), torch.tensor([6, 7]))
    torch.testing.assert_close(cache.k[1, 1, :, 6:8], k_new[1])  # slot 5 held column 0, slot 0 column 1


def test_llama3_rope_frequencies_equal_transformers():
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    hf = tiny_hf_model("llama", rope_scaling=LLAMA3_ROPE, rope_theta=500000.0)
    want, _ = ROPE_INIT_FUNCTIONS["llama3"](hf.config, "cpu")
    shape = ModelShape.from_hf_config(hf.config)
    assert shape.rope_scaling.rope_type == "llama3"
    torch.testing.assert_close(shape.inv_freq(), want, atol=0, rtol=0)


def test_rows_of_different_lengths_equal_each_row_alone():
    hf = tiny_hf_model("qwen3", head_dim=24)
    gen = torch.Generator().manual_seed(2)
    lengths, width = [9, 14, 5], 14
    tokens = torch.randint(0, 97, (3, width), generator=gen)  # [B, T]; row b is real up to lengths[b]
    batch = native_of(hf, batch_size=3, max_len=32)
    prefill = batch.forward(tokens, chain(width, batch=3))  # pads after each row's end: its own slots
    nxt = torch.randint(0, 97, (3, 2), generator=gen)  # [B, 2] two more tokens per row, at its own length
    steps = batch.forward(nxt, torch.tensor(lengths)[:, None] + torch.arange(2))  # [B, 2, V]
    for b, n in enumerate(lengths):
        alone = native_of(hf, max_len=32)
        row = torch.cat([tokens[b : b + 1, :n], nxt[b : b + 1]], dim=1)  # [1, n+2]
        want = alone.forward(row, chain(n + 2))[0]  # [n+2, V]
        torch.testing.assert_close(prefill[b, :n], want[:n], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(steps[b], want[n:], atol=1e-5, rtol=1e-5)


def tree_case():
    """Prefix P=6, glue g1 g2 at slots 6, 7; three 2-token branches attached after 0, 1, 2 glue tokens.

    Branch j's tokens sit at slots 8+2j, 9+2j but at logical positions 6+j, 7+j.
    """
    gen = torch.Generator().manual_seed(3)
    prefix, glue = torch.randint(0, 97, (6,), generator=gen), torch.randint(0, 97, (2,), generator=gen)
    branches = torch.randint(0, 97, (3, 2), generator=gen)  # [branch, depth]
    slots = torch.arange(8, 14)  # [6]: branch-major
    positions = torch.tensor([6 + j + d for j in range(3) for d in range(2)])  # [6]
    mask = torch.zeros(6, 32, dtype=torch.bool)  # [T, S_max]
    for j in range(3):
        for d in range(2):
            row = 2 * j + d
            mask[row, : 6 + j] = True  # prefix and the first j glue tokens
            mask[row, 8 + 2 * j : 8 + 2 * j + d + 1] = True  # own branch, up to itself
    contexts = [torch.cat([prefix, glue[:j], branches[j]]) for j in range(3)]
    return torch.cat([prefix, glue]), branches.flatten(), positions, slots, mask, contexts


@pytest.mark.parametrize("depth_by_depth", [False, True])
def test_tree_mask_equals_each_branch_as_a_plain_chain(depth_by_depth):
    hf = tiny_hf_model("llama", rope_scaling=LLAMA3_ROPE)
    main, tree_tokens, positions, slots, mask, contexts = tree_case()
    model = native_of(hf, max_len=32)
    model.forward(main[None], chain(8))
    if depth_by_depth:  # as SSD builds it: one forward per depth, all branches batched
        order = [[0, 2, 4], [1, 3, 5]]
    else:
        order = [list(range(6))]
    got = torch.empty(6, 97)
    for cols in order:
        idx = torch.tensor(cols)
        got[idx] = model.forward(tree_tokens[idx][None], positions[idx][None], slots=slots[idx][None],
                                 attn_mask=mask[idx][None])[0]
    for j, context in enumerate(contexts):
        alone = native_of(hf, max_len=32)
        want = alone.forward(context[None], chain(len(context)))[0, -2:]  # [2, V]
        torch.testing.assert_close(got[2 * j : 2 * j + 2], want, atol=1e-5, rtol=1e-5)


def test_logits_at_returns_the_chosen_columns():
    hf = tiny_hf_model("llama")
    model = native_of(hf, batch_size=2)
    tokens = torch.randint(0, 97, (2, 7))  # [B, T]
    full = model.forward(tokens, chain(7, batch=2))
    picked = model.forward(tokens, chain(7, batch=2), logits_at=torch.tensor([[6], [3]]))  # [B, 1, V]
    torch.testing.assert_close(picked[:, 0], full[[0, 1], [6, 3]])


def test_int8_logits_close_to_fp32():
    hf = tiny_hf_model("llama", tie_word_embeddings=True)
    tokens = torch.randint(0, 97, (4, 24), generator=torch.Generator().manual_seed(4))  # [B, T]
    fp32 = native_of(hf, batch_size=4).forward(tokens, chain(24, batch=4))
    model = native_of(hf, batch_size=4, weights="int8")
    int8 = model.forward(tokens, chain(24, batch=4))
    assert int8.dtype == torch.float32
    error = (int8 - fp32).abs() / fp32.std()  # bf16 activations and int8 weights: ~1% noise
    assert error.mean() < 0.02 and error.max() < 0.15
    assert (int8.argmax(-1) == fp32.argmax(-1)).float().mean() > 0.9
    assert model.weight_bytes_per_forward() < 0.35 * native_of(hf).weight_bytes_per_forward()


def test_random_model_from_a_shape_runs_and_counts_bytes():
    shape = ModelShape(2, 32, 4, 2, 8, 64, 50, True, has_qk_norm=True, has_qkv_bias=True, max_position=64)
    model = build_random_model(shape, seed=5)
    model.allocate(1, 16)
    logits = model.forward(torch.tensor([[1, 2, 3]]), chain(3))
    assert logits.shape == (1, 3, 50) and torch.isfinite(logits).all()
    assert model.weight_bytes_per_forward() == shape.weight_bytes_per_forward(torch.float32)
    again = build_random_model(shape, seed=5)
    again.allocate(1, 16)
    torch.testing.assert_close(again.forward(torch.tensor([[1, 2, 3]]), chain(3)), logits)


def test_known_shapes_match_published_parameter_counts():
    counts = {"smollm2-135m": 134_515_008, "llama-3.2-1b": 1_235_814_400, "llama-3.1-8b": 8_030_261_248,
              "llama-3.1-70b": 70_553_706_496, "qwen3-0.6b": 596_049_920}
    for name, count in counts.items():
        assert KNOWN_SHAPES[name].num_params() == count, name
    with pytest.raises(UsageError, match="did you mean 'llama-3.1-8b'"):
        known_shape("llama-3.1-8")


def test_shape_from_config_equals_the_table_entry():
    from transformers import LlamaConfig

    config = LlamaConfig(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                         num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=8192,
                         rope_theta=100000.0, rms_norm_eps=1e-5, tie_word_embeddings=True)
    assert ModelShape.from_hf_config(config) == KNOWN_SHAPES["smollm2-135m"]


def test_clear_errors_for_bad_weights_and_use():
    hf = tiny_hf_model("llama")
    state = dict(hf.state_dict())
    del state["model.layers.1.mlp.up_proj.weight"]
    with pytest.raises(UsageError, match="lack 'model.layers.1.mlp.up_proj.weight'"):
        build_native_model(hf.config, state)
    with pytest.raises(UsageError, match="unknown weight format"):
        build_native_model(hf.config, hf.state_dict(), weights="int4")
    model = build_native_model(hf.config, hf.state_dict())
    with pytest.raises(UsageError, match="before allocate"):
        model.forward(torch.tensor([[1]]), chain(1))
    model.allocate(1, 8)
    model.backend = type("ChainOnly", (type(model.backend),), {"supports_tree_masks": False})()
    model.backend_name = "chain-only"
    with pytest.raises(UsageError, match="cannot take custom masks"):
        model.forward(torch.tensor([[1]]), chain(1), attn_mask=torch.ones(1, 1, 8, dtype=torch.bool))


def test_smollm2_matches_transformers():
    """The real shipped model, loaded the way `ssdbench run` loads it (converted once, then cached)."""
    from transformers import AutoModelForCausalLM

    from ssdbench.models.checkpoint.source import resolve_model

    source = resolve_model("smollm2-135m")
    hf = AutoModelForCausalLM.from_pretrained(source.path).eval()
    tokens = torch.randint(0, hf.config.vocab_size, (1, 24), generator=torch.Generator().manual_seed(0))
    assert_native_matches_hf(hf, tokens, atol=2e-4, chunk=3)
