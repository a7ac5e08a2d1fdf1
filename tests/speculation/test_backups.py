"""ssd's fast backup: the row's own n-gram continuation, else random tokens from the draft's generator."""

from __future__ import annotations

import pytest
import torch

from ssdbench.speculation.backups import fast_proposal


def test_continuation_first_then_seeded_random_tokens():
    assert fast_proposal([5, 6, 7, 1, 5, 6], k=3, vocab_size=50, generator=torch.Generator()) == [7, 1, 5]
    draws = [fast_proposal([1, 2, 3], k=4, vocab_size=50, generator=torch.Generator().manual_seed(7))
             for _ in range(2)]
    assert draws[0] == draws[1] and all(0 <= t < 50 for t in draws[0])


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_random_tokens_from_a_cuda_generator():
    """A CUDA draft's generator lives on the GPU: the draw must happen there (it failed on a CPU tensor)."""
    tokens = fast_proposal([1, 2, 3], k=4, vocab_size=50, generator=torch.Generator("cuda").manual_seed(7))
    assert len(tokens) == 4 and all(0 <= t < 50 for t in tokens)
