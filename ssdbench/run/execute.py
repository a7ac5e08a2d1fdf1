"""Runs every variant of a plan over the same requests and records them.

Round-loop methods get a proposer per batch from their method module; baselines decode one
request at a time. Both run on the target's placement, in the plan's order.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import torch

from ssdbench.decoding.batch import RowState, new_batch
from ssdbench.decoding.loop import decode_batch
from ssdbench.decoding.recorder import Recorder, RequestKey
from ssdbench.decoding.protocols import Proposer
from ssdbench.decoding.workload import WARMUP_TOKENS, DecodeSettings, Workload
from ssdbench.endpoints.runner import EndpointRunner
from ssdbench.methods.base import MethodContext, ProposerFactory
from ssdbench.models.cuda_graphs import checked_mode, uses_cuda_graphs
from ssdbench.models.model_set import ModelSet
from ssdbench.profiling.placement import pinned
from ssdbench.projection.calibrate import calibrate
from ssdbench.run.plan import RunPlan, Variant
from ssdbench.run.schedule import schedule
from ssdbench.sampling.accept import verify_proposal
from ssdbench.sampling.acceptance_setting import EXACT
from ssdbench.sampling.synthetic import SyntheticRule


def count_units(plan: RunPlan, workload: Workload) -> int:
    """Progress units: one per request per variant (endpoint variants included)."""
    num_endpoints = len(plan.endpoints.variants()) if plan.endpoints is not None else 0
    return (len(plan.variants) + num_endpoints) * workload.num_requests * plan.decode.repeats


@dataclass
class _Runner:
    warm_up: Callable[[], None]
    run: Callable[[int, list[int]], None]  # (repeat, request indices of one batch)


def run_all(plan: RunPlan, models: ModelSet, workload: Workload, recorder: Recorder,
            advance: Callable[[str, int], None]) -> dict | None:
    """Every variant on every request, in the plan's order; all of them (baselines included) on
    the target's placement and thread count, so no method gets cores the others lack.

    Returns the cost calibration (projection.calibrate) taken on that placement afterwards."""
    labels = {v.key: v.label for v in plan.variants}
    endpoints = _endpoint_runners(plan, models, workload, recorder)
    in_turn = {key: r for key, r in endpoints.items() if r.variant.concurrency == 1}  # scheduled like methods
    labels.update({key: r.variant.label for key, r in in_turn.items()})
    with contextlib.ExitStack() as stack:
        # draft processes start before the target pins itself, so they do not inherit the target's cores
        runners = {v.key: stack.enter_context(_variant_runner(plan, v, plan.method_context(v.engine, models, workload,
                                                                                               recorder)))
                   for v in plan.variants}
        runners.update(endpoints)
        stack.enter_context(pinned(plan.pinned))
        for runner in runners.values():  # first calls of a shape pay one-off kernel set-up; keep that out of the records
            runner.warm_up()
        for unit in schedule(list(labels), workload.num_requests, batch_size=plan.decode.batch_size,
                             repeats=plan.decode.repeats, order=plan.order):
            runners[unit.variant].run(unit.repeat, list(unit.request_idx))
            advance(labels[unit.variant], len(unit.request_idx))
        units = [(r, i) for r in range(plan.decode.repeats) for i in range(workload.num_requests)]
        for key, runner in endpoints.items():
            if key not in in_turn:  # concurrency N > 1: all requests at once, at most N in flight
                runner.run_concurrent(units, lambda n, label=runner.variant.label: advance(label, n))
        return _calibrate(plan, models, workload)


def _endpoint_runners(plan: RunPlan, models: ModelSet, workload: Workload, recorder: Recorder) -> dict:
    """One EndpointRunner per endpoint variant (--endpoint), keyed like method variants."""
    if plan.endpoints is None:
        return {}
    tokenizer = models.tokenizer

    def tokenize(text: str) -> list[int]:
        return list(tokenizer.encode(text, add_special_tokens=False)) if text else []

    return {v.key: EndpointRunner(v, plan.endpoints, workload, plan.decode, recorder, tokenize)
            for v in plan.endpoints.variants()}


def _calibrate(plan: RunPlan, models: ModelSet, workload: Workload) -> dict | None:
    """Forward costs for the prediction, at the run's mean mid-decode context (native engine only)."""
    if not plan.runs_round_loop_natively:
        return None
    mean_prompt = sum(len(t) for t in workload.token_ids) / workload.num_requests
    context = max(1, round(mean_prompt + plan.decode.max_new_tokens / 2))
    prompt = list(workload.token_ids[0]) * (context // len(workload.token_ids[0]) + 1)
    in_process_draft = plan.draft.has_model and any(
        m.uses_draft and not m.is_baseline and not m.own_process for m in plan.methods)
    draft = models.draft("native") if in_process_draft else None
    return calibrate(models.target("native"), draft, prompt[:context], k=plan.decode.k)


@contextlib.contextmanager
def _variant_runner(plan: RunPlan, variant: Variant, ctx: MethodContext):
    if variant.method.is_baseline:
        yield _baseline_runner(variant, ctx)
        return
    with variant.method.proposers(ctx) as factory:
        def warm_up() -> None:
            for rows in _warm_up_sizes(ctx):
                _decode_requests(ctx, variant, list(range(rows)), seed=ctx.decode.seed, max_new_tokens=WARMUP_TOKENS,
                                 factory=factory)

        yield _Runner(warm_up=warm_up, run=lambda repeat, idx: _run_loop_batch(ctx, variant, repeat, idx, factory))


def _warm_up_sizes(ctx: MethodContext) -> list[int]:
    """Rows of the warm-up batches: one full batch; where CUDA graphs replay, also the last batch's
    smaller size, whose step shapes are captured when its cache is first allocated."""
    requests, size = ctx.workload.num_requests, ctx.decode.batch_size
    sizes = [min(size, requests)]
    if _cache_capacity(ctx) is not None and requests > size and requests % size:
        sizes.append(requests % size)
    return sizes


def _run_loop_batch(ctx: MethodContext, variant: Variant, repeat: int, idx: list[int],
                    factory: ProposerFactory) -> None:
    decode, workload = ctx.decode, ctx.workload
    seed = decode.request_seed(idx[0], repeat)
    keys = [RequestKey(variant.name, variant.engine, workload.suite, workload.prompt_ids[i], i, repeat) for i in idx]
    acceptance = ctx.decode.acceptance if variant.method.uses_draft else EXACT
    rounds: list = []
    try:
        batch, timing, steps = _decode_requests(ctx, variant, idx, seed=seed, max_new_tokens=decode.max_new_tokens,
                                                factory=factory, rounds=rounds)
    except BaseException:  # stopped mid-batch: its measured rounds go in the run's partial record
        ctx.recorder.add_steps(keys, rounds, acceptance=acceptance)
        raise
    ctx.recorder.add_steps(keys, steps, acceptance=acceptance)
    rounds_per_row = Counter(s.row for s in steps)  # one pass over the batch's records
    for row_idx, (key, row) in enumerate(zip(keys, batch.rows)):
        times = (timing.start_ns, timing.first_token_ns, timing.row_end_ns[row_idx])
        ctx.recorder.add_request(key, row, seed=seed, temperature=decode.target.temperature, times_ns=times,
                                 rounds=rounds_per_row[row_idx], batch_size=len(idx))


def _decode_requests(ctx: MethodContext, variant: Variant, idx: list[int], *, seed: int, max_new_tokens: int,
                     factory: ProposerFactory, rounds: list | None = None):
    target = ctx.models.target(variant.engine)
    generator = torch.Generator(device=target.device).manual_seed(seed)
    proposer = factory(len(idx), generator)
    batch = new_batch(
        [list(ctx.workload.token_ids[i]) for i in idx], max_new_tokens=max_new_tokens,
        eos_ids=ctx.decode.eos_ids(ctx.workload), k=ctx.decode.k if proposer is not None else 0,
        capacity=_cache_capacity(ctx),
    )
    sampling = ctx.decode.rows(len(idx), draft=False, device=target.device)
    try:
        timing, steps = decode_batch(target, proposer, batch, sampling, generator,
                                     verify=_acceptance_rule(ctx.decode, proposer, seed=seed), rounds=rounds)
    finally:
        if proposer is not None:
            proposer.close()
    return batch, timing, steps


def _cache_capacity(ctx: MethodContext) -> int | None:
    """The run's one cache capacity where CUDA graphs replay (a graph reads the cache it was captured
    on, so every batch gets the same one); None elsewhere: each batch allocates what it needs."""
    devices = (ctx.models.device, ctx.models.draft_device, ctx.draft_placement.device)
    mode = checked_mode(ctx.models.config.cuda_graphs)  # what decides each model's wrapping (model_set, server)
    if any(uses_cuda_graphs(mode, d) for d in devices):
        return ctx.decode.cache_capacity(ctx.workload)
    return None


def _acceptance_rule(decode: DecodeSettings, proposer: Proposer | None, *, seed: int):
    """The exact rule, or (--acceptance synthetic:...) the synthetic one for rounds that verify drafts;
    ar's rounds verify nothing and stay exact."""
    if decode.synthetic is None or proposer is None:
        return verify_proposal
    return SyntheticRule(decode.synthetic, seed=seed, held_bonuses=getattr(proposer, "held_bonuses", None))


def _baseline_runner(variant: Variant, ctx: MethodContext) -> _Runner:
    baseline = variant.method.baseline(ctx)
    decode, workload = ctx.decode, ctx.workload
    eos_ids = decode.eos_ids(workload)

    def generate(request_idx: int, *, seed: int, max_new_tokens: int):
        return baseline.generate(list(workload.token_ids[request_idx]), seed=seed, max_new_tokens=max_new_tokens,
                                 eos_ids=eos_ids)

    def run(repeat: int, idx: list[int]) -> None:
        for i in idx:  # one at a time, whatever --batch-size says: recorded as batch 1
            seed = decode.request_seed(i, repeat)
            result = generate(i, seed=seed, max_new_tokens=decode.max_new_tokens)
            row = RowState(prompt_ids=list(workload.token_ids[i]), tokens=list(workload.token_ids[i]),
                           max_new_tokens=decode.max_new_tokens, eos_ids=eos_ids)
            row.commit(result.output_ids, round_idx=0)
            key = RequestKey(variant.name, variant.engine, workload.suite, workload.prompt_ids[i], i, repeat)
            ctx.recorder.add_request(key, row, seed=seed, temperature=decode.target.temperature,
                                     times_ns=(result.start_ns, result.first_token_ns, result.end_ns), rounds=0,
                                     batch_size=1)

    return _Runner(warm_up=lambda: generate(0, seed=decode.seed, max_new_tokens=WARMUP_TOKENS), run=run)
