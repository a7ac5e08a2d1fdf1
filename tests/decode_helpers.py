"""Drive the real round loop directly, without the CLI, for exactness tests."""

from __future__ import annotations

import torch

from ssdbench.decoding.batch import new_batch
from ssdbench.decoding.draft_model import DraftModelProposer
from ssdbench.decoding.loop import decode_batch
from ssdbench.decoding.ngram import NgramProposer
from ssdbench.sampling.params import RowSampling, SamplingParams


def sampling_rows(num_rows: int, temperature: float, top_p: float = 1.0) -> RowSampling:
    return RowSampling.from_params([SamplingParams(temperature=temperature, top_p=top_p)] * num_rows)


def make_proposer(kind, draft, *, k: int, num_rows: int, generator, draft_temperature: float = 0.0, top_p: float = 1.0):
    if kind == "ar":
        return None
    if kind == "ngram":
        return NgramProposer(lookahead=k)
    return DraftModelProposer(draft, lookahead=k, sampling=sampling_rows(num_rows, draft_temperature, top_p), generator=generator)


def decode(target, proposer, prompts, *, max_new_tokens: int, k: int, temperature: float = 0.0, top_p: float = 1.0,
           eos_ids=frozenset(), seed: int = 0, generator=None, **loop_kwargs):
    """Returns (batch, steps) after decoding `prompts` together."""
    batch = new_batch(prompts, max_new_tokens=max_new_tokens, eos_ids=frozenset(eos_ids), lookahead=k)
    generator = generator or torch.Generator().manual_seed(seed)
    _, steps = decode_batch(target, proposer, batch, sampling_rows(len(prompts), temperature, top_p), generator, **loop_kwargs)
    return batch, steps
