"""`hf-static`: transformers' `generate` with a static KV cache, which transformers compiles with
`torch.compile` on CUDA: its fastest path, the one a native engine on a GPU has to beat."""

from __future__ import annotations

from ssdbench.methods.base import Method, MethodContext
from ssdbench.methods.transformers_generate import TransformersBaseline, describe_common


def _cache_len(ctx: MethodContext) -> int:
    """One cache size for every request (the longest prompt plus every new token), so the compiled
    forward's shapes repeat and it is compiled once, in the warm-up."""
    return ctx.workload.longest_prompt + ctx.decode.max_new_tokens + 1


def _baseline(ctx: MethodContext):
    return TransformersBaseline(ctx.models.hf_target(), ctx.decode, static_cache_len=_cache_len(ctx))


def _describe(ctx: MethodContext) -> dict:
    return {**describe_common(ctx.decode, ctx.baseline_placement), "draft": None,
            "cache": f"StaticCache of {_cache_len(ctx)} slots for every request; transformers compiles the forward "
                     "with torch.compile on CUDA (not on CPU)"}


METHOD = Method(
    name="hf-static",
    summary="transformers' generate, static cache (compiled on CUDA) (baseline)",
    engines=(),
    is_baseline=True,
    baseline=_baseline,
    describe=_describe,
)
