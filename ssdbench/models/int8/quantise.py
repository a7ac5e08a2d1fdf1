"""Symmetric per-output-channel int8 quantisation: the one int8 copy every kernel reads."""

from __future__ import annotations

import torch


def quantize_int8(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric per-row int8: weight [out, in] -> (int8 [out, in], fp32 scales [out])."""
    w = weight.float()  # [out, in]
    scales = w.abs().amax(dim=1).clamp(min=1e-12) / 127.0  # [out]
    q = torch.round(w / scales[:, None]).clamp_(-127, 127).to(torch.int8)  # [out, in]
    return q, scales
