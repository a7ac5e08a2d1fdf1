"""A static, slot-indexed KV cache: fixed shapes, no lengths inside.

Each row b of the batch owns slots [0, S_max) per layer. A forward writes its new keys
and values at the slots the caller names (per row, any order), and attention reads a
prefix of slots through a mask. The caller tracks how many slots each row has
committed, so rolling back rejected drafts is just not advancing that length: the stale
slots are overwritten by the next write and masked until then.

Where the fused CPU step runs (kernels/decode_layer.c), the keys are also kept in blocks of
slots, transposed (`key_blocks`): the layout its attention scores from, which it otherwise
rebuilt from the keys for every block at every step (~0.8 ms of a 9 ms draft step). Every write,
copy and clear here keeps the two equal, as decode_layer.c does for its own writes.
"""

from __future__ import annotations

import torch


class StaticKVCache:
    """K and V buffers [L, B, Hkv, S_max, D], written at per-row slots."""

    def __init__(
        self,
        *,
        num_layers: int,
        batch_size: int,
        num_kv_heads: int,
        max_len: int,
        head_dim: int,
        device: torch.device | str = "cpu",
        dtype: torch.dtype = torch.float32,
    ) -> None:
        size = (num_layers, batch_size, num_kv_heads, max_len, head_dim)
        self.k = torch.zeros(size, device=device, dtype=dtype)  # [L, B, Hkv, S_max, D]
        self.v = torch.zeros(size, device=device, dtype=dtype)  # [L, B, Hkv, S_max, D]
        self.key_blocks: torch.Tensor | None = None  # [L, B, Hkv, S_max / blk, D, blk], see add_key_blocks

    def add_key_blocks(self, block: int) -> None:
        """Keep the keys also as blocks of `block` slots, each transposed [D, block] (zeroed, as k is)."""
        layers, batch, heads, slots, dim = self.k.shape
        blocks = -(-slots // block)
        self.key_blocks = torch.zeros(layers, batch, heads, blocks, dim, block, device=self.k.device,
                                      dtype=self.k.dtype)  # [L, B, Hkv, S_max / blk, D, blk]

    def first_rows(self, batch_size: int) -> StaticKVCache:
        """A cache of this one's first `batch_size` rows, sharing its buffers (views, not copies):
        CUDA graphs captured on a row count keep reading the same memory (cuda_graphs.py)."""
        if not 0 < batch_size <= self.batch_size:
            raise ValueError(f"{batch_size} rows of a cache of {self.batch_size}")
        view = object.__new__(StaticKVCache)
        view.k, view.v = self.k[:, :batch_size], self.v[:, :batch_size]  # [L, b, Hkv, S_max, D] each
        view.key_blocks = None if self.key_blocks is None else self.key_blocks[:, :batch_size]
        return view

    def clear(self) -> None:
        """Zero every slot in place, as a fresh allocation is (the buffers keep their addresses)."""
        self.k.zero_()
        self.v.zero_()
        if self.key_blocks is not None:
            self.key_blocks.zero_()

    @property
    def batch_size(self) -> int:
        return self.k.shape[1]

    @property
    def max_len(self) -> int:
        return self.k.shape[3]

    def nbytes(self) -> int:
        blocks = 0 if self.key_blocks is None else self.key_blocks.numel()
        return (2 * self.k.numel() + blocks) * self.k.element_size()

    def slot_index(self, slots: torch.Tensor) -> torch.Tensor:
        """Scatter index for `write`, built once per forward: [B, T] -> [B, Hkv, T, D]."""
        b, t = slots.shape
        _, _, hkv, _, d = self.k.shape
        return slots.view(b, 1, t, 1).expand(b, hkv, t, d)  # [B, Hkv, T, D]

    def write(self, layer: int, index: torch.Tensor, k_new: torch.Tensor, v_new: torch.Tensor) -> None:
        """Store k_new, v_new [B, Hkv, T, D] at the slots behind `index` (from `slot_index`)."""
        self.k[layer].scatter_(2, index, k_new)
        self.v[layer].scatter_(2, index, v_new)
        if self.key_blocks is not None:
            b, hkv, t, d = k_new.shape
            blocked = self.key_blocks[layer].view(b, hkv, -1)  # [B, Hkv, S_max / blk * D * blk]
            block = self.key_blocks.shape[-1]
            # slot s, dim i -> (s // blk) * D * blk + i * blk + s % blk
            at = index // block * (d * block) + torch.arange(d, device=index.device) * block + index % block
            blocked.scatter_(2, at.reshape(b, hkv, t * d), k_new.reshape(b, hkv, t * d))

    def read(self, layer: int, span: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Views of slots [0, span) of one layer: k, v [B, Hkv, span, D]."""
        return self.k[layer, :, :, :span], self.v[layer, :, :, :span]

    def copy_slots(self, row: int, src: torch.Tensor, dst: torch.Tensor) -> None:
        """In every layer, copy row `row`'s K/V at slots src [N] to slots dst [N] (e.g. a hit branch onto the main line)."""
        self.k[:, row, :, dst] = self.k[:, row, :, src]
        self.v[:, row, :, dst] = self.v[:, row, :, src]
        if self.key_blocks is not None:
            block = self.key_blocks.shape[-1]
            kb = self.key_blocks
            kb[:, row, :, dst // block, :, dst % block] = kb[:, row, :, src // block, :, src % block]
