"""Tiny random models of the Llama family for fast, real-code-path tests."""

from __future__ import annotations

import torch


def tiny_llama_config(*, vocab: int = 64, layers: int = 2, hidden: int = 32, heads: int = 4, kv_heads: int = 2,
                      tie: bool = False, **extra):
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=kv_heads, max_position_embeddings=256,
        tie_word_embeddings=tie, **extra,
    )


def tiny_state_dict(config, *, seed: int, head_scale: float = 3.0) -> dict[str, torch.Tensor]:
    """Random weights; `head_scale` sharpens the output distribution (larger = peakier)."""
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).eval()
    state = {name: t.detach().clone() for name, t in model.state_dict().items()}
    if "lm_head.weight" in state and not config.tie_word_embeddings:
        state["lm_head.weight"] *= head_scale
    return state


def perturbed(state: dict[str, torch.Tensor], *, scale: float, seed: int) -> dict[str, torch.Tensor]:
    """A draft that agrees with the target often but not always: its weights plus noise."""
    gen = torch.Generator().manual_seed(seed)
    return {k: v + scale * v.std() * torch.randn(v.shape, generator=gen) if v.dim() == 2 else v.clone()
            for k, v in state.items()}


def native(config, state, *, weights: str = "fp32"):
    """A native model on the kernels the fused step runs (kernels/decode_layer.c) where gemv.c builds here,
    so the exactness tests drive sd's and ssd's verify, glue and tree steps through it."""
    from ssdbench.kernels.gemv import gemv_unavailable_reason
    from ssdbench.models.int8.dynamic import INT8_BF16, INT8_FBGEMM, INT8_ONEDNN
    from ssdbench.models.int8.rows import INT8_DEQUANT, INT8_PACK
    from ssdbench.models.build import build_native_model

    fused = gemv_unavailable_reason("cpu", torch.float32) is None
    kernels = {}
    if fused:
        others = frozenset({INT8_PACK, INT8_DEQUANT, INT8_BF16, INT8_FBGEMM, INT8_ONEDNN})  # torch's kernels: not fused
        kernels = {"linear_kernel": "gemv"} if weights == "fp32" else {"disabled_kernels": others}
    return build_native_model(config, state, device="cpu", dtype=torch.float32, backend="sdpa", weights=weights,
                              **kernels)


def tiny_pair(*, vocab: int = 48, seed: int = 1, draft: str = "noisy", head_scale: float = 3.0, noise: float = 0.5):
    """(target, draft) native models sharing a vocabulary.

    draft: "int8" (the real self-int8 path), "noisy" (perturbed copy), "other" (unrelated weights).
    """
    config = tiny_llama_config(vocab=vocab)
    state = tiny_state_dict(config, seed=seed, head_scale=head_scale)
    target = native(config, state)
    if draft == "int8":
        return target, native(config, state, weights="int8")
    if draft == "noisy":
        return target, native(config, perturbed(state, scale=noise, seed=seed + 100))
    return target, native(config, tiny_state_dict(config, seed=seed + 200, head_scale=head_scale))
