"""What a decoding method is to the run: a name, what it needs, and how it builds its proposers
or its baseline (docs/DESIGN.md §8, "Adding a method").

Round-loop methods (ar, sd, ssd, ...) hand the loop a proposer per batch; generate-style peers
(transformers now, vLLM or SGLang later) are Baselines that decode one request and time it
themselves. Either way a method is one module declaring a `METHOD`, listed in registry.py.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import ContextManager, Protocol

import torch

from ssdbench.decoding.protocols import Proposer
from ssdbench.decoding.recorder import Recorder
from ssdbench.decoding.workload import DecodeSettings, Workload
from ssdbench.models.drafts import DraftChoice
from ssdbench.models.model_set import ModelSet
from ssdbench.profiling.placement import Placement
from ssdbench.speculation.policy import SsdPolicy

TRANSFORMERS = "transformers"  # the engine label of generate-style baselines


@dataclass
class GenerateResult:
    output_ids: list[int]
    start_ns: int
    first_token_ns: int  # the prefill's end: the decode window starts here
    end_ns: int


class Baseline(Protocol):
    """A generate-style peer: decodes one request from its prompt, timing prefill and decode itself."""

    def generate(self, prompt_ids: list[int], *, seed: int, max_new_tokens: int,
                 eos_ids: frozenset[int]) -> GenerateResult: ...


ProposerFactory = Callable[[int, torch.Generator | None], Proposer | None]  # (rows, generator) -> proposer


@dataclass(frozen=True)
class MethodContext:
    """The run plan's resolved pieces a method builds from, for one engine."""

    engine: str
    models: ModelSet
    workload: Workload
    decode: DecodeSettings
    draft: DraftChoice
    draft_placement: Placement  # where a draft in its own process runs
    ssd: SsdPolicy | None = None
    recorder: Recorder | None = None  # for what happens outside this process (kernels, events)
    baseline_placement: dict = field(default_factory=dict)  # described in the manifest


def no_slack(k: int) -> int:
    return 0


@dataclass(frozen=True)
class Method:
    name: str
    summary: str  # one line for `ssdbench ls` and --help
    uses_draft: bool = False  # reads --draft (a model or n-gram lookup)
    needs_draft_model: bool = False  # a draft model, not lookup
    own_process: bool = False  # drafts in a process of its own: target and draft are pinned apart
    engines: tuple[str, ...] = ("native", "hf")  # model codes it runs on (baselines: transformers' own)
    is_baseline: bool = False
    draft_slack: Callable[[int], int] = no_slack  # positions past prompt + new tokens it writes, given K
    proposers: Callable[[MethodContext], ContextManager[ProposerFactory]] | None = None
    baseline: Callable[[MethodContext], Baseline] | None = None
    describe: Callable[[MethodContext], dict | None] = lambda ctx: None  # for the manifest

    def label(self, engine: str) -> str:
        """How a variant is named in tables: `sd`, `sd@hf`; baselines by method name."""
        return self.name if engine == "native" or self.is_baseline else f"{self.name}@{engine}"


@contextlib.contextmanager
def one_factory(factory: ProposerFactory) -> Iterator[ProposerFactory]:
    """For methods whose proposers need nothing opened or closed around the variant."""
    yield factory
