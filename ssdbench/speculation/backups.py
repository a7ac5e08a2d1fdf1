"""Proposals for rows whose outcome the speculation cache did not foresee (docs/DESIGN.md §5.6)."""

from __future__ import annotations

import torch

from ssdbench.decoding.ngram import lookup_continuation

BACKUPS = ("jit", "fast", "auto")


def fast_proposal(history: list[int], *, k: int, vocab_size: int, generator: torch.Generator) -> list[int]:
    """Free: the n-gram continuation of the row's own text, or random tokens when there is none."""
    guess = lookup_continuation(history, max_ngram=3, num_tokens=k)
    if guess:
        return guess
    # drawn where the generator lives: a CUDA draft's generator cannot drive a CPU draw
    return torch.randint(0, vocab_size, (k,), generator=generator, device=generator.device).tolist()
