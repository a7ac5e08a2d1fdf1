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


def save_tiny_model(folder: Path, *, vocab: int = 64, seed: int = 0, eos_token_id: int = 1) -> Path:
    """A random tiny Llama with a word-level tokenizer, saved with save_pretrained (safetensors)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                         tie_word_embeddings=False, eos_token_id=eos_token_id, bos_token_id=None)
    torch.manual_seed(seed)
    LlamaForCausalLM(config).save_pretrained(folder)
    tiny_tokenizer(vocab).save_pretrained(folder)
    return folder
