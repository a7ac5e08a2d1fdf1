"""The cache's keys kept again in transposed blocks of slots (models/kv_cache.py), the layout the fused
step's attention scores from: every writer keeps them equal to the keys (the Python path's writes and
copies, decode_layer.c's writes), and attention from them gives the bits it gave transposing the keys."""

import pytest
import torch

from ssdbench.kernels.gemv import gemv_unavailable_reason
from ssdbench.models.kv_cache import StaticKVCache
from tests.models.test_native_model import chain, native_of, tiny_hf_model

pytestmark = pytest.mark.skipif(gemv_unavailable_reason("cpu", torch.float32) is not None,
                                reason=f"gemv.c cannot be built here: {gemv_unavailable_reason('cpu', torch.float32)}")


def reblocked(k: torch.Tensor, block: int) -> torch.Tensor:
    """k [L, B, Hkv, S, D] as [L, B, Hkv, ceil(S / block), D, block], zeros past S: the reference layout."""
    layers, batch, heads, slots, dim = k.shape
    blocks = -(-slots // block)
    padded = torch.zeros(layers, batch, heads, blocks * block, dim, dtype=k.dtype)
    padded[:, :, :, :slots] = k
    return padded.view(layers, batch, heads, blocks, block, dim).transpose(-1, -2)


def test_the_python_paths_writes_and_copies_keep_the_blocks():
    cache = StaticKVCache(num_layers=2, batch_size=2, num_kv_heads=3, max_len=37, head_dim=5)  # 37: a partial block
    cache.add_key_blocks(8)
    gen = torch.Generator().manual_seed(0)
    slots = torch.tensor([[3, 9, 36], [0, 17, 8]])  # [B, T], any order
    for layer in range(2):
        cache.write(layer, cache.slot_index(slots), torch.randn(2, 3, 3, 5, generator=gen),
                    torch.randn(2, 3, 3, 5, generator=gen))
    assert cache.key_blocks.abs().sum() > 0 and torch.equal(cache.key_blocks, reblocked(cache.k, 8))
    cache.copy_slots(1, torch.tensor([17, 8]), torch.tensor([30, 2]))
    assert torch.equal(cache.key_blocks, reblocked(cache.k, 8))
    assert torch.equal(cache.first_rows(1).key_blocks, reblocked(cache.k[:, :1], 8))
    cache.clear()
    assert not cache.key_blocks.any()


def fused_model(max_len: int = 70):
    model = native_of(tiny_hf_model("llama"), max_len=max_len, batch_size=2, weights="fp32", linear_kernel="gemv")
    assert model.fused is not None and model.cache.key_blocks is not None
    return model


def decode_some(model) -> list[torch.Tensor]:
    """A prefill, fused one-token steps at rows' own slots, a masked step past them, a slot copy, and a
    step on the Python path: every writer of the cache. Returns each step's logits."""
    gen = torch.Generator().manual_seed(3)
    tokens = torch.randint(0, 97, (2, 19), generator=gen)  # [B, T]
    out = [model.forward(tokens, chain(19, batch=2))]
    current = out[-1][:, -1:].argmax(-1)  # [B, 1]
    for step in range(4):
        out.append(model.forward(current, torch.tensor([[19 + step], [19 + step]])))
        current = out[-1].argmax(-1)
    slots = torch.tensor([[40, 41, 42], [50, 51, 52]])  # [B, 3]: a branch's slots past the chain
    mask = torch.zeros(2, 3, 70, dtype=torch.bool)  # [B, T, S_max]
    mask[:, :, :23] = True
    for t in range(3):
        mask[0, t, 40:41 + t] = mask[1, t, 50:51 + t] = True
    out.append(model.forward(torch.randint(0, 97, (2, 3), generator=gen), torch.tensor([[23, 24, 25]] * 2),
                             slots=slots, attn_mask=mask))
    model.copy_slots(0, torch.tensor([40, 41]), torch.tensor([23, 24]))
    model.fused_decode = False
    out.append(model.forward(current, torch.tensor([[25], [23]])))
    model.fused_decode, model._fused = True, False
    out.append(model.forward(current, torch.tensor([[26], [24]])))
    return out


def test_every_writer_keeps_the_blocks_equal_to_the_keys():
    model = fused_model()
    decode_some(model)
    block = model.fused.slot_block
    assert torch.equal(model.cache.key_blocks, reblocked(model.cache.k, block))


def test_attention_from_the_blocks_gives_the_bits_of_transposing_the_keys():
    with_blocks, without = fused_model(), fused_model()
    without.cache.key_blocks = None  # attention.c transposes each block of keys itself
    for got, want in zip(decode_some(with_blocks), decode_some(without), strict=True):
        assert torch.equal(got, want)
