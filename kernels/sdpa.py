"""Reference backend: torch's scaled_dot_product_attention with an explicit bool mask."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ssdbench.kernels.base import AttentionBackend


class SdpaBackend(AttentionBackend):
    """Exact masked attention on any device; the reference the fast backends are tested against.

    Grouped-query attention is done by folding each KV head's query group into the query
    axis ([B, Hkv, G*T, D]), so K/V are never repeated in memory.
    """

    name = "sdpa"
    supports_tree_masks = True

    def attend(self, q, k, v, mask, *, scale):
        b, h, t, d = q.shape
        hkv = k.shape[1]
        if h == hkv:
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
        g = h // hkv
        q_grouped = q.reshape(b, hkv, g * t, d)  # [B, Hkv, G*T, D] (heads of a group are adjacent)
        mask_grouped = mask.expand(b, g, t, mask.shape[-1]).reshape(b, 1, g * t, -1)  # [B, 1, G*T, S]
        out = F.scaled_dot_product_attention(q_grouped, k, v, attn_mask=mask_grouped, scale=scale)
        return out.view(b, h, t, d)  # [B, H, T, D]


def naive_attention(q, k, v, mask, *, scale):
    """softmax(Q K^T * scale) V with K/V heads repeated: the textbook definition, for tests."""
    g = q.shape[1] // k.shape[1]
    k_full = k.repeat_interleave(g, dim=1)  # [B, H, S, D]
    v_full = v.repeat_interleave(g, dim=1)  # [B, H, S, D]
    scores = (q.float() @ k_full.float().transpose(-1, -2)) * scale  # [B, H, T, S]
    scores = scores.masked_fill(~mask, float("-inf"))
    return (scores.softmax(-1) @ v_full.float()).to(q.dtype)  # [B, H, T, D]
