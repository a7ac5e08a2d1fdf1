"""Reference backend: torch's scaled_dot_product_attention with an explicit bool mask."""

from __future__ import annotations

import torch.nn.functional as F

from ssdbench.kernels.base import AttentionBackend


class SdpaBackend(AttentionBackend):
    """Exact masked attention on any device; the reference the fast backends are tested against.

    Grouped-query attention uses SDPA's `enable_gqa` (torch >= 2.5, which pyproject requires):
    K/V are not repeated in memory, and on CPU it is ~1.6x faster per call than folding each
    KV head's query group into the query axis.
    """

    name = "sdpa"
    supports_tree_masks = True

    def attend(self, q, k, v, mask, *, scale):
        gqa = q.shape[1] != k.shape[1]
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=gqa)


def naive_attention(q, k, v, mask, *, scale):
    """softmax(Q K^T * scale) V with K/V heads repeated: the textbook definition, for tests."""
    g = q.shape[1] // k.shape[1]
    k_full = k.repeat_interleave(g, dim=1)  # [B, H, S, D]
    v_full = v.repeat_interleave(g, dim=1)  # [B, H, S, D]
    scores = (q.float() @ k_full.float().transpose(-1, -2)) * scale  # [B, H, T, S]
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return (scores.softmax(-1) @ v_full.float()).to(q.dtype)  # [B, H, T, D]
