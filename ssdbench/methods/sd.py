"""`sd`: speculative decoding; the draft (a model, or n-gram lookup) proposes K tokens in the
target's process and one target forward verifies them (docs/DESIGN.md §2)."""

from __future__ import annotations

from ssdbench.decoding.draft_model import DraftModelProposer
from ssdbench.decoding.ngram import NgramProposer
from ssdbench.methods.base import Method, MethodContext, ProposerFactory, one_factory


def _factory(ctx: MethodContext) -> ProposerFactory:
    k = ctx.decode.k
    if not ctx.draft.has_model:
        return lambda num_rows, generator: NgramProposer(lookahead=k)

    def draft_model(num_rows: int, generator):
        draft = ctx.models.draft(ctx.engine)  # built on first use, under the target's placement
        sampling = ctx.decode.rows(num_rows, draft=True, device=draft.device)
        return DraftModelProposer(draft, lookahead=k, sampling=sampling, generator=generator)

    return draft_model


METHOD = Method(
    name="sd",
    summary="speculative: the draft proposes K tokens, one target forward verifies them",
    uses_draft=True,
    draft_slack=lambda k: k,
    proposers=lambda ctx: one_factory(_factory(ctx)),
)
