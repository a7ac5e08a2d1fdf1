"""Tiny model folders on disk, as a user would point `--target` at them."""

from __future__ import annotations

from pathlib import Path

import torch


def tiny_tokenizer(vocab: int):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = ["<unk>", "<eos>"] + [f"w{i}" for i in range(vocab - 2)]
    core = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=core, unk_token="<unk>", eos_token="<eos>")


EOS_ID = 1


def save_tiny_model(folder: Path, *, vocab: int = 64, seed: int = 0, max_positions: int = 512,
                    is_eos_first: bool = False, eos_token_id: int = EOS_ID, num_layers: int = 2) -> Path:
    """A random tiny Llama with a word-level tokenizer, saved with save_pretrained (safetensors).

    is_eos_first: every next token is EOS (id EOS_ID), so every request ends at its first token.
    """
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=num_layers,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=max_positions,
                         tie_word_embeddings=False, eos_token_id=eos_token_id, bos_token_id=None)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    if is_eos_first:
        _make_eos_first(model)
    model.save_pretrained(folder)
    tiny_tokenizer(vocab).save_pretrained(folder)
    return folder


@torch.no_grad()
def _make_eos_first(model) -> None:
    """Layers add nothing to the residual stream, so the final hidden state is the (all-ones) embedding,
    and only EOS's row of the head sees it."""
    for layer in model.model.layers:
        layer.self_attn.o_proj.weight.zero_()
        layer.mlp.down_proj.weight.zero_()
    model.model.embed_tokens.weight.fill_(1.0)
    model.lm_head.weight.zero_()
    model.lm_head.weight[EOS_ID].fill_(1.0)
