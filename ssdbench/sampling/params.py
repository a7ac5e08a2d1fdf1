"""Sampling settings for one request, and their per-row tensor form for a batch."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ssdbench.sampling.checks import check_sampling


@dataclass(frozen=True)
class SamplingParams:
    """How tokens are chosen from a distribution. Temperature 0 means argmax (greedy)."""

    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0  # 0 = off

    def __post_init__(self) -> None:
        check_sampling(self.temperature, self.top_p, self.top_k)

    @property
    def is_greedy(self) -> bool:
        return self.temperature == 0


@dataclass(frozen=True)
class RowSampling:
    """Per-row sampling settings of a batch, as tensors (rows may differ: greedy beside sampled)."""

    temperature: torch.Tensor  # [B] float32
    top_p: torch.Tensor  # [B] float32
    top_k: tuple[int, ...]  # [B]

    @property
    def is_greedy(self) -> torch.Tensor:
        return self.temperature == 0  # [B] bool

    @property
    def all_greedy(self) -> bool:
        return bool(self.is_greedy.all())

    def to(self, device: torch.device | str) -> RowSampling:
        return RowSampling(temperature=self.temperature.to(device), top_p=self.top_p.to(device), top_k=self.top_k)

    @classmethod
    def from_params(cls, params: list[SamplingParams], device: torch.device | str = "cpu") -> RowSampling:
        temperature = torch.tensor([p.temperature for p in params], dtype=torch.float32, device=device)  # [B]
        top_p = torch.tensor([p.top_p for p in params], dtype=torch.float32, device=device)  # [B]
        return cls(temperature=temperature, top_p=top_p, top_k=tuple(p.top_k for p in params))
