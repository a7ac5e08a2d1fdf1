"""`hf-generate`: transformers' own `generate` on the target, the baseline users already run."""

from __future__ import annotations

from ssdbench.methods.base import Method, MethodContext
from ssdbench.methods.transformers_generate import TransformersBaseline, describe_common


def _baseline(ctx: MethodContext):
    return TransformersBaseline(ctx.models.hf_target(), ctx.decode)


def _describe(ctx: MethodContext) -> dict:
    return {**describe_common(ctx.decode, ctx.baseline_placement), "draft": None}


METHOD = Method(
    name="hf-generate",
    summary="transformers' generate (baseline)",
    engines=(),
    is_baseline=True,
    baseline=_baseline,
    describe=_describe,
)
