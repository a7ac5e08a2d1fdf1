"""Runs every (method, engine) variant of a run over the same requests and records them."""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import torch

from ssdbench.config import RunConfig
from ssdbench.decoding.batch import new_batch
from ssdbench.decoding.hf_baselines import hf_generate
from ssdbench.decoding.loop import decode_batch
from ssdbench.decoding.recorder import Recorder, RequestKey
from ssdbench.decoding.variants import HF_METHODS, build_proposer, row_sampling, variants
from ssdbench.models.model_set import NGRAM, ModelSet
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


def run_all(config: RunConfig, models: ModelSet, workload: Workload, recorder: Recorder, advance: Callable[[str, int], None]) -> None:
    from ssdbench.profiling.placement import pinned

    target_placement = placements(config)[0] if "ssd" in config.methods or config.target_device else None
    for method, engine in variants(config):
        if method in HF_METHODS:
            for repeat in range(config.repeats):
                _run_hf_baseline(config, models, workload, recorder, method, repeat, advance)
            continue
        # the draft process starts before the target pins itself, so it does not inherit the target's cores
        with _proposer_factory(config, models, workload, method, engine, recorder) as factory, pinned(target_placement):
            for repeat in range(config.repeats):
                _run_loop_variant(config, models, workload, recorder, method, engine, repeat, advance, factory)


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


def _run_loop_variant(config, models, workload, recorder, method, engine, repeat, advance, factory) -> None:
    if repeat == 0:  # first calls of a shape pay one-off kernel set-up; keep that out of the records
        _decode_requests(config, models, workload, method, engine, list(range(min(config.batch_size, workload.num_requests))),
                         seed=config.seed, max_new_tokens=WARMUP_TOKENS, factory=factory)
    for start in range(0, workload.num_requests, config.batch_size):
        idx = list(range(start, min(start + config.batch_size, workload.num_requests)))
        seed = request_seed(config, idx[0], repeat)
        batch, timing, steps = _decode_requests(config, models, workload, method, engine, idx, seed=seed,
                                                max_new_tokens=config.max_new_tokens, factory=factory)
        keys = [RequestKey(method, engine, workload.suite, workload.prompt_ids[i], i, repeat) for i in idx]
        recorder.add_steps(keys, steps)
        rounds_per_row = Counter(s.row for s in steps)  # one pass over the batch's records
        for row_idx, (key, row) in enumerate(zip(keys, batch.rows)):
            rounds = rounds_per_row[row_idx]
            times = (timing.start_ns, timing.first_token_ns, timing.row_end_ns[row_idx])
            recorder.add_request(key, row, seed=seed, temperature=config.temperature, times_ns=times, rounds=rounds)
        advance(f"{method}@{engine}", len(idx))


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


def _run_hf_baseline(config, models, workload, recorder, method, repeat, advance) -> None:
    from ssdbench.decoding.batch import RowState

    model = models.hf_target()
    assisted = method == "hf-assisted"
    assistant = models.hf_draft() if assisted and config.draft != NGRAM else None
    lookup = config.k if assisted and config.draft == NGRAM else None
    if repeat == 0:
        hf_generate(model, list(workload.token_ids[0]), max_new_tokens=WARMUP_TOKENS, temperature=config.temperature,
                    top_p=config.top_p, ignore_eos=True, seed=config.seed, assistant=assistant,
                    prompt_lookup_tokens=lookup, lookahead=config.k)
    for i in range(workload.num_requests):
        seed = request_seed(config, i, repeat)
        prompt = list(workload.token_ids[i])
        result = hf_generate(
            model, prompt, max_new_tokens=config.max_new_tokens, temperature=config.temperature, top_p=config.top_p,
            ignore_eos=config.ignore_eos, seed=seed, assistant=assistant, prompt_lookup_tokens=lookup, lookahead=config.k,
        )
        row = RowState(prompt_ids=prompt, tokens=prompt, max_new_tokens=config.max_new_tokens,
                       eos_ids=frozenset() if config.ignore_eos else workload.eos_ids)
        row.tokens = list(prompt)
        row.commit(result.output_ids, round_idx=0)
        key = RequestKey(method, "transformers", workload.suite, workload.prompt_ids[i], i, repeat)
        recorder.add_request(key, row, seed=seed, temperature=config.temperature,
                             times_ns=(result.start_ns, result.first_token_ns, result.end_ns), rounds=0)
        advance(method, 1)
