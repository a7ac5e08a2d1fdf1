"""The requests of a run and how each is decoded: the same for every variant of the run."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ssdbench.decoding.batch import cache_slots
from ssdbench.sampling.params import RowSampling, SamplingParams
from ssdbench.sampling.acceptance_setting import EXACT, SyntheticAcceptance

WARMUP_TOKENS = 8  # first calls of a shape pay one-off kernel set-up; a short decode keeps that out of the records


@dataclass(frozen=True)
class Workload:
    """The tokenised requests of a run, identical for every variant."""

    suite: str
    prompt_ids: tuple[str, ...]
    token_ids: tuple[tuple[int, ...], ...]
    eos_ids: frozenset[int]
    texts: tuple[str, ...] = ()  # each prompt's first user turn, untemplated (a chat endpoint's message)

    @property
    def num_requests(self) -> int:
        return len(self.prompt_ids)

    @property
    def longest_prompt(self) -> int:
        return max(len(t) for t in self.token_ids)


@dataclass(frozen=True)
class DecodeSettings:
    """Per-request decoding settings every method shares (made once by the run plan)."""

    k: int = 4  # draft tokens per round (methods without a draft ignore it)
    max_new_tokens: int = 64
    batch_size: int = 1
    repeats: int = 1
    seed: int = 0
    ignore_eos: bool = False
    target: SamplingParams = SamplingParams()
    draft: SamplingParams = SamplingParams()  # what drafts sample at (exact either way)
    synthetic: SyntheticAcceptance | None = None  # --acceptance synthetic:...; None: the exact rule

    def cache_capacity(self, workload: Workload) -> int:
        """Cache slots per row for every batch of a run whose models replay CUDA graphs (warm-up
        included), whatever its prompts and method: batches then allocate the same cache, which the
        graphs need to outlive a batch (models/cuda_graphs.py, run/execute.py:_cache_capacity)."""
        new_tokens = max(self.max_new_tokens, WARMUP_TOKENS)  # the warm-up may decode more than the run
        return cache_slots(workload.longest_prompt, max_new_tokens=new_tokens, k=self.k)

    @property
    def acceptance(self) -> str:
        """How sd/ssd rounds accept, as recorded: `exact` or the synthetic setting's label."""
        return EXACT if self.synthetic is None else self.synthetic.label

    @property
    def greedy(self) -> bool:
        return self.target.is_greedy

    @property
    def samples_anywhere(self) -> bool:
        """True when target or draft samples: then proposals carry their distributions q."""
        return not (self.target.is_greedy and self.draft.is_greedy)

    def rows(self, num_rows: int, *, draft: bool, device: torch.device | str) -> RowSampling:
        """The target's (or the draft's) sampling for a batch of `num_rows` rows."""
        return RowSampling.from_params([self.draft if draft else self.target] * num_rows, device=device)

    def eos_ids(self, workload: Workload) -> frozenset[int]:
        return frozenset() if self.ignore_eos else workload.eos_ids

    def request_seed(self, request_idx: int, repeat: int) -> int:
        """The same seed for a request in every variant, distinct across repeats."""
        return self.seed + 1_000_003 * repeat + request_idx
