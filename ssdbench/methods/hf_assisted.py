"""`hf-assisted`: transformers' assisted generation with sd's draft (or its prompt lookup), fixed K."""

from __future__ import annotations

from ssdbench.methods.base import Method, MethodContext
from ssdbench.methods.transformers_generate import TransformersBaseline, describe_common

ASSISTED_NOTE = ("the continuation starts without the prefill's cache (assisted generate from a given cache decodes "
                 "wrongly in transformers 5.x): the target re-reads the prompt and the assistant builds its KV cache "
                 "inside the decode window")


def _baseline(ctx: MethodContext):
    if not ctx.draft.has_model:
        return TransformersBaseline(ctx.models.hf_target(), ctx.decode, prompt_lookup_tokens=ctx.decode.k)
    return TransformersBaseline(ctx.models.hf_target(), ctx.decode, assistant=ctx.models.hf_draft())


def _draft_description(ctx: MethodContext) -> str:
    if ctx.draft.int8:
        return ("copy of the target whose every nn.Linear (lm_head included) is the native self-int8 draft's "
                f"weight-only int8 linear: same per-row int8 weights, kernel {ctx.models.int8_kernels().name}")
    if not ctx.draft.has_model:
        return f"transformers' prompt lookup (prompt_lookup_num_tokens={ctx.decode.k}), not sd's n-gram proposer"
    return f"transformers' model of {ctx.draft.spec} (sd's draft weights, transformers' kernels)"


def _describe(ctx: MethodContext) -> dict:
    """The manifest's entry; K is recorded as "lookahead", the name older runs' manifests carry."""
    return {**describe_common(ctx.decode, ctx.baseline_placement), "draft": _draft_description(ctx),
            "lookahead": ctx.decode.k, "note": ASSISTED_NOTE}


METHOD = Method(
    name="hf-assisted",
    summary="transformers' assisted generation (baseline)",
    uses_draft=True,
    engines=(),
    is_baseline=True,
    draft_slack=lambda k: k,
    baseline=_baseline,
    describe=_describe,
)
