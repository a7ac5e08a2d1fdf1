"""The attention-backend interface every kernel implements.

A backend computes masked attention over a static, slot-indexed KV cache. The model
hands it the query heads and the cache slice it needs; the boolean mask says which
cache slots each query may see (True = may attend), so one interface serves a plain
causal chain and SSD's tree drafting alike.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch


class AttentionBackend(ABC):
    """Masked attention: softmax(q k^T * scale + mask) v, grouped-query aware."""

    name: str = ""
    # False: the backend only handles causal chains (each query sees every slot up to
    # its own, rows may differ in length); the model refuses to hand it a custom mask.
    supports_tree_masks: bool = False

    @abstractmethod
    def attend(
        self,
        q: torch.Tensor,  # [B, H, T, D]
        k: torch.Tensor,  # [B, Hkv, S, D]
        v: torch.Tensor,  # [B, Hkv, S, D]
        mask: torch.Tensor | None,  # [B, 1, T, S] bool, True = may attend; None = every slot
        *,
        scale: float,
    ) -> torch.Tensor:  # [B, H, T, D]
        """Attend each query to the slots its mask row allows; H is a multiple of Hkv.

        Every query must see at least one slot. The model passes mask=None when all S
        slots are visible to every query (a one-token step of a single chain).
        """

    def check(self, *, device: torch.device, dtype: torch.dtype) -> None:
        """Raise UsageError when this backend cannot run on `device` with `dtype`."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} tree_masks={self.supports_tree_masks}>"
