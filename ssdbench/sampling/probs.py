"""Logits to the exact distribution a token is drawn from (temperature, top-k, top-p)."""

from __future__ import annotations

import torch

from ssdbench.sampling.params import RowSampling


def logits_to_probs(logits: torch.Tensor, sampling: RowSampling) -> torch.Tensor:
    """The distribution each row samples from. Greedy rows get a one-hot at the argmax.

    logits: [B, T, V] (any float dtype). Returns fp32 probabilities [B, T, V].
    """
    logits = logits.float()
    temperature = sampling.temperature.clamp_min(1e-6).view(-1, 1, 1)  # [B, 1, 1]
    probs = torch.softmax(logits / temperature, dim=-1)  # [B, T, V]
    if any(sampling.top_k):
        probs = _keep_top_k(probs, sampling.top_k)
    if bool((sampling.top_p < 1).any()):
        probs = _keep_top_p(probs, sampling.top_p)
    greedy = sampling.is_greedy
    if bool(greedy.any()):
        one_hot = _one_hot_argmax(logits)  # [B, T, V]
        probs = torch.where(greedy.view(-1, 1, 1), one_hot, probs)
    return probs


def _one_hot_argmax(logits: torch.Tensor) -> torch.Tensor:
    one_hot = torch.zeros_like(logits, dtype=torch.float32)  # [B, T, V]
    return one_hot.scatter_(-1, logits.argmax(dim=-1, keepdim=True), 1.0)


def _keep_top_k(probs: torch.Tensor, top_k: tuple[int, ...]) -> torch.Tensor:
    out = probs.clone()
    for row, k in enumerate(top_k):
        if 0 < k < probs.shape[-1]:
            kth = probs[row].topk(k, dim=-1).values[..., -1:]  # [T, 1]
            out[row] = torch.where(probs[row] >= kth, probs[row], 0.0)
    return out / out.sum(dim=-1, keepdim=True)


def _keep_top_p(probs: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Keep the smallest set of most likely tokens whose mass reaches top_p (at least one)."""
    sorted_probs, order = probs.sort(dim=-1, descending=True)  # [B, T, V]
    mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs  # [B, T, V]
    keep_sorted = mass_before < top_p.view(-1, 1, 1)
    keep = torch.zeros_like(keep_sorted).scatter_(-1, order, keep_sorted)
    kept = torch.where(keep, probs, 0.0)
    return kept / kept.sum(dim=-1, keepdim=True)


def sample_from(probs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """One token per distribution. probs: [N, V] -> [N] int64. Greedy rows are one-hot, so exact."""
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


def point_mass(tokens: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """q for a proposal that was not sampled: one-hot rows. tokens: [B, K] -> [B, K, V] fp32."""
    q = torch.zeros(*tokens.shape, vocab_size, dtype=torch.float32, device=tokens.device)  # [B, K, V]
    return q.scatter_(-1, tokens.unsqueeze(-1).clamp_min(0), 1.0)
