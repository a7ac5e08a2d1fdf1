"""Reference backend: torch's scaled_dot_product_attention with an explicit bool mask."""

from __future__ import annotations

import torch.nn.functional as F

from ssdbench.kernels.base import AttentionBackend


class SdpaBackend(AttentionBackend):
    """Exact masked attention on any device; the reference the fast backends are tested against.

    Grouped-query attention uses SDPA's `enable_gqa` (torch >= 2.5, which pyproject requires):
    K/V are not repeated in memory, and on CPU it is ~1.6x faster per call than folding each
    KV head's query group into the query axis. On CUDA a masked call folds instead: there the
    kernels that take a mask (memory-efficient, cuDNN) do not take `enable_gqa`, and SDPA would
    fall back to its math kernel, which repeats K/V and builds the fp32 scores in memory.
    """

    name = "sdpa"
    supports_tree_masks = True

    def attend(self, q, k, v, mask, *, scale):
        gqa = q.shape[1] != k.shape[1]
        if gqa and mask is not None and q.is_cuda:
            return folded_gqa_attention(q, k, v, mask, scale=scale)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=gqa)


def folded_gqa_attention(q, k, v, mask, *, scale):
    """Grouped-query attention as plain attention, K/V not repeated: query head j reads KV head
    j // g, so each KV head's g query heads become g x T query rows of one head.

    q [B, H, T, D], k/v [B, Hkv, S, D], mask [B, 1, T, S] bool -> [B, H, T, D].
    """
    b, h, t, d = q.shape
    g = h // k.shape[1]
    rows = q.reshape(b, k.shape[1], g * t, d)  # [B, Hkv, g*T, D]: row i*T + t is head (kv*g + i)'s query t
    o = F.scaled_dot_product_attention(rows, k, v, attn_mask=mask.repeat(1, 1, g, 1), scale=scale)  # [B, Hkv, g*T, D]
    return o.reshape(b, h, t, d)  # CUDA's memory-efficient kernel returns a transposed layout: not a view


def naive_attention(q, k, v, mask, *, scale):
    """softmax(Q K^T * scale) V with K/V heads repeated: the textbook definition, for tests."""
    g = q.shape[1] // k.shape[1]
    k_full = k.repeat_interleave(g, dim=1)  # [B, H, S, D]
    v_full = v.repeat_interleave(g, dim=1)  # [B, H, S, D]
    scores = (q.float() @ k_full.float().transpose(-1, -2)) * scale  # [B, H, T, S]
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return (scores.softmax(-1) @ v_full.float()).to(q.dtype)  # [B, H, T, D]
