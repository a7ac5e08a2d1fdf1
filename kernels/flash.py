"""Optional flash-attn backend: causal chains only, CUDA only, fp16/bf16 only.

It is built on `flash_attn_with_kvcache`, whose per-row `cache_seqlens` matches the
static slot-indexed cache: a row whose last query sits at slot L-1 attends causally over
slots [0, L). Tree masks cannot be expressed, so `supports_tree_masks` is False and SSD's
tree drafting must use `sdpa`. Not exercised on CPU machines (flash-attn cannot be
installed there); on a GPU it is tested against `sdpa`.
"""

from __future__ import annotations

import importlib.util

import torch

from ssdbench.errors import UsageError
from ssdbench.kernels.base import AttentionBackend

_HALF_DTYPES = (torch.float16, torch.bfloat16)


def unavailable_reason(device: torch.device | str | None = None) -> str | None:
    """Why flash cannot be used here (None when it can); `device` None means the default CUDA one."""
    if importlib.util.find_spec("flash_attn") is None:
        return "flash-attn is not installed (optional extra `ssdbench[flash]`; it builds only with CUDA)"
    if not torch.cuda.is_available():
        return "flash-attn needs a CUDA device and none is visible"
    if device is not None and torch.device(device).type != "cuda":
        return f"flash-attn runs only on CUDA devices, not on {torch.device(device).type}"
    return None


class FlashBackend(AttentionBackend):
    """flash-attn over the cache slice, each row's length read off its causal mask."""

    name = "flash"
    supports_tree_masks = False

    def __init__(self) -> None:
        from flash_attn import flash_attn_with_kvcache  # deferred: heavy, CUDA-only

        self._kernel = flash_attn_with_kvcache

    def check(self, *, device, dtype):
        reason = unavailable_reason(device)
        if reason is not None:
            raise UsageError(f"attention backend 'flash' is unavailable: {reason}")
        if dtype not in _HALF_DTYPES:
            raise UsageError(f"attention backend 'flash' needs float16 or bfloat16, not {dtype}; use --dtype bf16 or 'sdpa'")

    def attend(self, q, k, v, mask, *, scale):
        # A chain row's last query sees exactly slots [0, L): L = its mask row's count.
        if mask is None:
            seqlens = torch.full((q.shape[0],), k.shape[2], dtype=torch.int32, device=q.device)  # [B]
        else:
            seqlens = mask[:, 0, -1].sum(-1, dtype=torch.int32)  # [B]
        out = self._kernel(
            q.transpose(1, 2),  # [B, T, H, D]
            k.transpose(1, 2),  # [B, S, Hkv, D] view; flash only needs the last dim contiguous
            v.transpose(1, 2),  # [B, S, Hkv, D]
            cache_seqlens=seqlens,
            softmax_scale=scale,
            causal=True,
        )  # [B, T, H, D]
        return out.transpose(1, 2)  # [B, H, T, D]
