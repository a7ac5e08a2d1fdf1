"""Runs every (method, engine) variant of a run over the same requests and records them."""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import torch

from ssdbench.config import RunConfig
from ssdbench.decoding.batch import RowState, new_batch
from ssdbench.decoding.hf_baselines import hf_generate
from ssdbench.decoding.loop import decode_batch
from ssdbench.decoding.recorder import Recorder, RequestKey
from ssdbench.decoding.variants import HF_METHODS, build_proposer, row_sampling, variant_label, variants
from ssdbench.models.model_set import NGRAM, ModelSet
from ssdbench.profiling.placement import Placement
from ssdbench.schedule import schedule
from ssdbench.speculation.setup import placements


@dataclass(frozen=True)
class Workload:
    """The tokenised requests of a run, identical for every variant."""

    suite: str
    prompt_ids: tuple[str, ...]
    token_ids: tuple[tuple[int, ...], ...]
    eos_ids: frozenset[int]

    @property
    def num_requests(self) -> int:
        return len(self.prompt_ids)


def request_seed(config: RunConfig, request_idx: int, repeat: int) -> int:
    """The same seed for a request in every variant, distinct across repeats."""
    return config.seed + 1_000_003 * repeat + request_idx


def count_units(config: RunConfig, workload: Workload) -> int:
    """Progress units: one per request per variant."""
    return len(variants(config)) * workload.num_requests * config.repeats


def pinned_placement(config: RunConfig) -> Placement | None:
    """The target's placement where the run pins it (ssd in the run, or --target-device given), else None.
    Every in-process method, the transformers baselines included, runs under it."""
    if "ssd" in config.methods or config.target_device is not None:
        return placements(config)[0]
    return None


def run_all(config: RunConfig, models: ModelSet, workload: Workload, recorder: Recorder,
            advance: Callable[[str, int], None]) -> dict | None:
    """Every variant on every request, in `config.order`; all of them (baselines included) on
    the target's placement and thread count, so no method gets cores the others lack.

    Returns the cost calibration (projection.calibrate) taken on that placement afterwards."""
    from ssdbench.profiling.placement import pinned

    target_placement = pinned_placement(config)
    pairs = variants(config)
    with contextlib.ExitStack() as stack:
        # draft processes start before the target pins itself, so they do not inherit the target's cores
        runners = {pair: stack.enter_context(_variant_runner(config, models, workload, recorder, *pair))
                   for pair in pairs}
        stack.enter_context(pinned(target_placement))
        for pair in pairs:  # first calls of a shape pay one-off kernel set-up; keep that out of the records
            runners[pair].warm_up()
        for unit in schedule(pairs, workload.num_requests, batch_size=config.batch_size, repeats=config.repeats,
                             order=config.order):
            runners[unit.variant].run(unit.repeat, list(unit.request_idx))
            advance(variant_label(*unit.variant), len(unit.request_idx))
        return _calibrate(config, models, workload)


def _calibrate(config: RunConfig, models: ModelSet, workload: Workload) -> dict | None:
    """Forward costs for the prediction, at the run's mean mid-decode context (native engine only)."""
    from ssdbench.projection.calibrate import calibrate

    if "native" not in config.engines or not any(m in ("ar", "sd", "ssd") for m in config.methods):
        return None
    mean_prompt = sum(len(t) for t in workload.token_ids) / workload.num_requests
    context = max(1, round(mean_prompt + config.max_new_tokens / 2))
    prompt = list(workload.token_ids[0]) * (context // len(workload.token_ids[0]) + 1)
    has_draft = "sd" in config.methods and config.draft != NGRAM
    draft = models.draft("native") if has_draft else None
    return calibrate(models.target("native"), draft, prompt[:context], k=config.k)


@dataclass
class _Runner:
    warm_up: Callable[[], None]
    run: Callable[[int, list[int]], None]  # (repeat, request indices of one batch)


@contextlib.contextmanager
def _variant_runner(config, models, workload, recorder, method, engine):
    if method in HF_METHODS:
        yield _hf_runner(config, models, workload, recorder, method)
        return
    with _proposer_factory(config, models, workload, method, engine, recorder) as factory:
        warm = list(range(min(config.batch_size, workload.num_requests)))
        yield _Runner(
            warm_up=lambda: _decode_requests(config, models, workload, method, engine, warm, seed=config.seed,
                                             max_new_tokens=WARMUP_TOKENS, factory=factory),
            run=lambda repeat, idx: _run_loop_batch(config, models, workload, recorder, method, engine, repeat, idx,
                                                    factory),
        )


@contextlib.contextmanager
def _proposer_factory(config, models, workload, method, engine, recorder):
    """Builds each batch's proposer; for ssd, owns the draft process for the whole variant."""
    if method != "ssd":
        yield lambda num_rows, generator: build_proposer(config, method, engine, models, num_rows, generator)
        return
    from ssdbench.speculation.client import DraftServer, RemoteSsdProposer
    from ssdbench.speculation.setup import draft_spec, fan_out_policy

    spec = draft_spec(config, models, placements(config)[1], fan_out_policy(config))
    with_q = config.temperature > 0 or config.effective_draft_temperature > 0
    max_prompt = max(len(t) for t in workload.token_ids)
    with DraftServer(spec, num_rows=config.batch_size, max_prompt=max_prompt, vocab_size=models.vocab_size,
                     with_q=with_q, round_timeout_s=config.round_timeout_s) as server:
        recorder.kernels["ssd draft process"] = server.kernels
        yield lambda num_rows, generator: RemoteSsdProposer(server, row_sampling(config, num_rows, draft=True, device="cpu"))
        recorder.add_events(method, "draft", server.box.read_events())


WARMUP_TOKENS = 8


def _run_loop_batch(config, models, workload, recorder, method, engine, repeat, idx, factory) -> None:
    seed = request_seed(config, idx[0], repeat)
    batch, timing, steps = _decode_requests(config, models, workload, method, engine, idx, seed=seed,
                                            max_new_tokens=config.max_new_tokens, factory=factory)
    keys = [RequestKey(method, engine, workload.suite, workload.prompt_ids[i], i, repeat) for i in idx]
    recorder.add_steps(keys, steps)
    rounds_per_row = Counter(s.row for s in steps)  # one pass over the batch's records
    for row_idx, (key, row) in enumerate(zip(keys, batch.rows)):
        times = (timing.start_ns, timing.first_token_ns, timing.row_end_ns[row_idx])
        recorder.add_request(key, row, seed=seed, temperature=config.temperature, times_ns=times,
                             rounds=rounds_per_row[row_idx], batch_size=len(idx))


def _decode_requests(config, models, workload, method, engine, idx, *, seed, max_new_tokens, factory):
    target = models.target(engine)
    generator = torch.Generator(device=target.device).manual_seed(seed)
    proposer = factory(len(idx), generator)
    batch = new_batch(
        [list(workload.token_ids[i]) for i in idx], max_new_tokens=max_new_tokens,
        eos_ids=frozenset() if config.ignore_eos else workload.eos_ids, lookahead=config.k if method != "ar" else 0,
    )
    sampling = row_sampling(config, len(idx), draft=False, device=target.device)
    try:
        timing, steps = decode_batch(target, proposer, batch, sampling, generator)
    finally:
        if proposer is not None:
            proposer.close()
    return batch, timing, steps


def _hf_runner(config, models, workload, recorder, method) -> _Runner:
    model = models.hf_target()
    assisted = method == "hf-assisted"
    assistant = models.hf_draft() if assisted and config.draft != NGRAM else None
    lookup = config.k if assisted and config.draft == NGRAM else None
    eos_ids = frozenset() if config.ignore_eos else workload.eos_ids

    def generate(request_idx: int, *, seed: int, max_new_tokens: int):
        return hf_generate(model, list(workload.token_ids[request_idx]), max_new_tokens=max_new_tokens,
                           temperature=config.temperature, top_p=config.top_p, eos_ids=eos_ids, seed=seed,
                           assistant=assistant, prompt_lookup_tokens=lookup, lookahead=config.k)

    def run(repeat: int, idx: list[int]) -> None:
        for i in idx:  # one at a time, whatever --batch-size says: recorded as batch 1
            seed = request_seed(config, i, repeat)
            result = generate(i, seed=seed, max_new_tokens=config.max_new_tokens)
            row = RowState(prompt_ids=list(workload.token_ids[i]), tokens=list(workload.token_ids[i]),
                           max_new_tokens=config.max_new_tokens, eos_ids=eos_ids)
            row.commit(result.output_ids, round_idx=0)
            key = RequestKey(method, "transformers", workload.suite, workload.prompt_ids[i], i, repeat)
            recorder.add_request(key, row, seed=seed, temperature=config.temperature,
                                 times_ns=(result.start_ns, result.first_token_ns, result.end_ns), rounds=0,
                                 batch_size=1)

    return _Runner(warm_up=lambda: generate(0, seed=config.seed, max_new_tokens=WARMUP_TOKENS), run=run)
