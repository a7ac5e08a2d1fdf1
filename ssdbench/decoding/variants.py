"""What a (method, engine) pair runs: the round loop with a proposer, or transformers' generate."""

from __future__ import annotations

import torch

from ssdbench.config import RunConfig
from ssdbench.decoding.draft_model import DraftModelProposer
from ssdbench.decoding.ngram import NgramProposer
from ssdbench.models.model_set import NGRAM, ModelSet
from ssdbench.sampling.params import RowSampling, SamplingParams

LOOP_METHODS = ("ar", "sd", "ssd")
HF_METHODS = ("hf-generate", "hf-assisted")


def variant_label(method: str, engine: str) -> str:
    """How a variant is named in tables: `sd`, `sd@hf`; transformers' baselines by method name."""
    return method if engine == "native" or method in HF_METHODS else f"{method}@{engine}"


def variants(config: RunConfig) -> list[tuple[str, str]]:
    """(method, engine) pairs in run order; transformers' baselines run once, not per engine."""
    pairs = [(m, e) for e in config.engines for m in config.methods if m in LOOP_METHODS and (m != "ssd" or e == "native")]
    pairs += [(m, "transformers") for m in config.methods if m in HF_METHODS]
    return pairs


def row_sampling(config: RunConfig, num_rows: int, *, draft: bool, device) -> RowSampling:
    temperature = config.effective_draft_temperature if draft else config.temperature
    params = SamplingParams(temperature=temperature, top_p=config.top_p)
    return RowSampling.from_params([params] * num_rows, device=device)


def build_proposer(config: RunConfig, method: str, engine: str, models: ModelSet, num_rows: int,
                   generator: torch.Generator | None):
    """None for `ar`; the draft model or n-gram lookup for `sd`."""
    if method == "ar":
        return None
    if config.draft == NGRAM:
        return NgramProposer(lookahead=config.k)
    draft = models.draft(engine)
    sampling = row_sampling(config, num_rows, draft=True, device=draft.device)
    return DraftModelProposer(draft, lookahead=config.k, sampling=sampling, generator=generator)
