"""`hf-generate`: transformers' own `generate` on the target, the baseline users already run."""

from __future__ import annotations

from ssdbench.methods.base import Method, MethodContext


def _baseline(ctx: MethodContext):
    from ssdbench.methods.transformers_generate import TransformersBaseline

    return TransformersBaseline(ctx.models.hf_target(), ctx.decode)


def _describe(ctx: MethodContext) -> dict:
    from ssdbench.methods.transformers_generate import describe_common

    return {**describe_common(ctx.decode, ctx.baseline_placement), "draft": None}


METHOD = Method(
    name="hf-generate",
    summary="transformers' generate (baseline)",
    engines=(),
    is_baseline=True,
    baseline=_baseline,
    describe=_describe,
)
