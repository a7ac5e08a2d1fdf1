"""A static, slot-indexed KV cache: fixed shapes, no lengths inside.

Each row b of the batch owns slots [0, S_max) per layer. A forward writes its new keys
and values at the slots the caller names (per row, any order), and attention reads a
prefix of slots through a mask. The caller tracks how many slots each row has
committed, so rolling back rejected drafts is just not advancing that length: the stale
slots are overwritten by the next write and masked until then.
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

    def first_rows(self, batch_size: int) -> StaticKVCache:
        """A cache of this one's first `batch_size` rows, sharing its buffers (views, not copies):
        CUDA graphs captured on a row count keep reading the same memory (cuda_graphs.py)."""
        if not 0 < batch_size <= self.batch_size:
            raise ValueError(f"{batch_size} rows of a cache of {self.batch_size}")
        view = object.__new__(StaticKVCache)
        view.k, view.v = self.k[:, :batch_size], self.v[:, :batch_size]  # [L, b, Hkv, S_max, D] each
        return view

    def clear(self) -> None:
        """Zero every slot in place, as a fresh allocation is (the buffers keep their addresses)."""
        self.k.zero_()
        self.v.zero_()

    @property
    def batch_size(self) -> int:
        return self.k.shape[1]

    @property
    def max_len(self) -> int:
        return self.k.shape[3]

    def nbytes(self) -> int:
        return 2 * self.k.numel() * self.k.element_size()

    def slot_index(self, slots: torch.Tensor) -> torch.Tensor:
        """Scatter index for `write`, built once per forward: [B, T] -> [B, Hkv, T, D]."""
        b, t = slots.shape
        _, _, hkv, _, d = self.k.shape
        return slots.view(b, 1, t, 1).expand(b, hkv, t, d)  # [B, Hkv, T, D]

    def write(self, layer: int, index: torch.Tensor, k_new: torch.Tensor, v_new: torch.Tensor) -> None:
        """Store k_new, v_new [B, Hkv, T, D] at the slots behind `index` (from `slot_index`)."""
        self.k[layer].scatter_(2, index, k_new)
        self.v[layer].scatter_(2, index, v_new)

    def read(self, layer: int, span: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Views of slots [0, span) of one layer: k, v [B, Hkv, span, D]."""
        return self.k[layer, :, :, :span], self.v[layer, :, :, :span]

    def copy_slots(self, row: int, src: torch.Tensor, dst: torch.Tensor) -> None:
        """In every layer, copy row `row`'s K/V at slots src [N] to slots dst [N] (e.g. a hit branch onto the main line)."""
        self.k[:, row, :, dst] = self.k[:, row, :, src]
        self.v[:, row, :, dst] = self.v[:, row, :, src]
