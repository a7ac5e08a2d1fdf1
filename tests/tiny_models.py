"""Tiny random models of the Llama family for fast, real-code-path tests."""

from __future__ import annotations

import torch


def tiny_llama_config(*, vocab: int = 64, layers: int = 2, hidden: int = 32, heads: int = 4, kv_heads: int = 2, **extra):
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=kv_heads, max_position_embeddings=256,
        tie_word_embeddings=True, **extra,
    )


def tiny_state_dict(config, *, seed: int, logit_scale: float = 1.0) -> dict[str, torch.Tensor]:
    """Random weights; `logit_scale` sharpens the output distribution (larger = peakier)."""
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        model.model.embed_tokens.weight.mul_(logit_scale)
    return {name: t.detach().clone() for name, t in model.state_dict().items()}


def native(config, state, *, weights: str = "fp32"):
    from ssdbench.models.llama import build_native_model

    return build_native_model(config, state, device="cpu", dtype=torch.float32, backend="sdpa", weights=weights)


def tiny_pair(*, vocab: int = 64, seed: int = 0, draft_seed: int | None = None, logit_scale: float = 1.0):
    """(target, draft) native models sharing a vocabulary; draft_seed None = int8 copy of the target."""
    config = tiny_llama_config(vocab=vocab)
    state = tiny_state_dict(config, seed=seed, logit_scale=logit_scale)
    target = native(config, state)
    if draft_seed is None:
        return target, native(config, state, weights="int8")
    return target, native(config, tiny_state_dict(config, seed=draft_seed, logit_scale=logit_scale))
