"""`ssd`: speculative speculative decoding (Saguaro): the draft runs in its own process and
prepares the next round's proposals while the target verifies (docs/DESIGN.md §5)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from ssdbench.methods.base import Method, MethodContext, ProposerFactory
from ssdbench.models.drafts import SELF_SKIP
from ssdbench.models.recipe import ModelRecipe
from ssdbench.speculation.client import DraftServer, RemoteSsdProposer
from ssdbench.speculation.server import DraftSpec


def draft_spec(ctx: MethodContext) -> DraftSpec:
    """What the draft process builds: the draft model on its own placement, and the speculator."""
    models, draft, place = ctx.models, ctx.draft, ctx.draft_placement
    source = models.target_source if draft.from_target else models.draft_source
    settings = models.config
    recipe = ModelRecipe(
        model_path=str(source.path or ""), random_shape=source.name if settings.random_weights else None,
        random_seed=source.seed if settings.random_weights else 0, trust_remote_code=settings.trust_remote_code,
        dtype=settings.dtype, int8=draft.int8, attention=settings.attention, linear_kernel=settings.linear_kernel,
        int8_kernel=settings.int8_kernel, skip_layers=models.skip_layers if draft.kind == SELF_SKIP else (),
        device=place.device)
    return DraftSpec(
        recipe=recipe, cores=place.cores, k=ctx.decode.k, fan_out=ctx.ssd.fan_out, backup=ctx.ssd.backup,
        saguaro_c=ctx.ssd.saguaro_c, seed=ctx.decode.seed, cuda_graphs=settings.cuda_graphs,
        posts_forks=ctx.decode.synthetic is not None and ctx.decode.synthetic.hit is not None,
    )


def payload_device(ctx: MethodContext) -> str:
    """Where proposals and q-rows are exchanged: the verifier's GPU (CUDA IPC), else host shared memory."""
    target = torch.device(ctx.models.device)
    return str(target) if target.type == "cuda" else "cpu"


@contextlib.contextmanager
def _proposers(ctx: MethodContext) -> Iterator[ProposerFactory]:
    """Owns the draft process for the whole variant; each batch gets a proposer talking to it."""
    with DraftServer(draft_spec(ctx), num_rows=ctx.decode.batch_size, max_prompt=ctx.workload.longest_prompt,
                     vocab_size=ctx.models.vocab_size, with_q=ctx.decode.samples_anywhere,
                     round_timeout_s=ctx.ssd.round_timeout_s, payload_device=payload_device(ctx)) as server:
        if ctx.recorder is not None:
            ctx.recorder.kernels["ssd draft process"] = server.kernels
            ctx.recorder.channels[METHOD.name] = server.round_trip_ms()
        yield lambda num_rows, generator: RemoteSsdProposer(server, ctx.decode.rows(num_rows, draft=True, device="cpu"))
        if ctx.recorder is not None:
            ctx.recorder.add_events(METHOD.name, "draft", server.box.read_events())


def _describe(ctx: MethodContext) -> dict:
    return ctx.ssd.describe()


METHOD = Method(
    name="ssd",
    summary="speculative speculative (Saguaro): drafting overlaps verification",
    uses_draft=True,
    needs_draft_model=True,
    own_process=True,
    engines=("native",),  # tree attention
    draft_slack=lambda k: 2 * k,
    proposers=_proposers,
    describe=_describe,
)
