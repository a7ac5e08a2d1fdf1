"""`sd`: speculative decoding; the draft (a model, or n-gram lookup) proposes K tokens in the
target's process and one target forward verifies them (docs/DESIGN.md §2)."""

from __future__ import annotations

import torch

from ssdbench.decoding.draft_model import DraftModelProposer
from ssdbench.decoding.ngram import NgramProposer
from ssdbench.methods.base import Method, MethodContext, ProposerFactory, one_factory
from ssdbench.profiling.devices import same_device


def _factory(ctx: MethodContext) -> ProposerFactory:
    k = ctx.decode.k
    if not ctx.draft.has_model:
        return lambda num_rows, generator: NgramProposer(k=k)

    def draft_model(num_rows: int, generator):
        draft = ctx.models.draft(ctx.engine)  # built on first use, under the target's placement
        sampling = ctx.decode.rows(num_rows, draft=True, device=draft.device)
        return DraftModelProposer(draft, k=k, sampling=sampling, generator=on_device(generator, draft.device))

    return draft_model


def on_device(generator: torch.Generator | None, device) -> torch.Generator | None:
    """The batch's generator where the draft samples; a draft on another GPU (--sd-draft-device) gets
    its own, seeded from the batch's, since a generator draws only on its own device."""
    if generator is None or same_device(generator.device, device):
        return generator
    seed = int(torch.randint(0, 2**62, (1,), generator=generator, device=generator.device))
    return torch.Generator(device=device).manual_seed(seed)


METHOD = Method(
    name="sd",
    summary="speculative: the draft proposes K tokens, one target forward verifies them",
    uses_draft=True,
    draft_slack=lambda k: k,
    proposers=lambda ctx: one_factory(_factory(ctx)),
)
