"""The draft process: load the draft, then answer rounds and build trees until told to stop.

Started by client.py with the `spawn` method; pinned to its own cores (or its own GPU).
It never outlives the verifier: it exits when the parent disappears, and ignores Ctrl-C,
SIGTERM and SIGHUP, which reach the whole process group (the verifier handles them and stops it).
"""

from __future__ import annotations

import json
import multiprocessing
import signal
import time
import traceback
from pathlib import Path
from dataclasses import dataclass

import torch

from ssdbench.models.recipe import ModelRecipe
from ssdbench.speculation import mailbox as mb
from ssdbench.speculation.codec import read_outcomes, write_answer, write_forks
from ssdbench.speculation.fan_out import FanOut


@dataclass(frozen=True)
class DraftSpec:
    """Everything the draft process needs to build its model and speculator (picklable)."""

    recipe: ModelRecipe  # the draft model, built as the target's process builds its models (models/recipe.py)
    cores: tuple[int, ...] | None
    k: int
    fan_out: FanOut
    backup: str
    saguaro_c: float
    seed: int
    cuda_graphs: str = "auto"  # the draft's plain steps replay CUDA graphs on CUDA (models/cuda_graphs.py)
    posts_forks: bool = False  # --acceptance synthetic:...,hit=H: tell the verifier each fork (codec.write_forks)

    @property
    def device(self) -> str:
        return self.recipe.device


def serve(box: mb.Mailbox, spec: DraftSpec) -> None:
    """Process entry point."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    try:
        speculator = _build_speculator(spec)
    except BaseException as err:  # report any start-up failure to the verifier, in one line
        box.write_error(f"draft process could not start: {type(err).__name__}: {err}")
        box.ctrl[mb.STATUS] = mb.STATUS_ERROR
        return
    speculator.on_event = _record_to(box)
    if spec.posts_forks:
        speculator.on_fork = lambda branches: write_forks(box, branches)
    box.write_error(json.dumps(speculator.draft.kernel_names()))  # the start-up report; read before any error
    box.ctrl[mb.STATUS] = mb.STATUS_OK
    try:
        _loop(box, speculator)
    except BaseException as err:
        where = traceback.extract_tb(err.__traceback__)[-1]
        box.write_error(f"{type(err).__name__}: {err} (at {Path(where.filename).name}:{where.lineno})")
        box.post_response(int(box.ctrl[mb.REQ_SEQ]), mb.STATUS_ERROR)


def _build_speculator(spec: DraftSpec):
    from ssdbench.models.cuda_graphs import unwrapped
    from ssdbench.profiling.devices import make_current
    from ssdbench.profiling.placement import Placement, pin_current_process
    from ssdbench.speculation.speculator import Speculator

    pin_current_process(Placement(spec.device, spec.device, spec.cores))
    make_current(spec.device)  # events, syncs and graph captures that name no device go to the current one
    draft = _build_draft(spec)
    start_up = unwrapped(draft)  # not graphed: this cache is dropped at the first batch
    start_up.allocate(1, 4)  # one forward starts torch's thread pool, so the pinning below covers it too
    start_up.forward(torch.zeros(1, 2, dtype=torch.int64, device=spec.device), torch.arange(2, device=spec.device).unsqueeze(0))
    pin_current_process(Placement(spec.device, spec.device, spec.cores))
    generator = torch.Generator(device=spec.device).manual_seed(spec.seed)
    return Speculator(draft, k=spec.k, fan_out=spec.fan_out, backup=spec.backup,
                      saguaro_c=spec.saguaro_c, generator=generator)


def _build_draft(spec: DraftSpec):
    """The draft's native model (graphed on CUDA unless --cuda-graphs off)."""
    from ssdbench.models.cuda_graphs import GraphedModel, checked_mode, uses_cuda_graphs

    model = _build_draft_model(spec)
    if not uses_cuda_graphs(checked_mode(spec.cuda_graphs), spec.device):
        return model
    return GraphedModel(model, max_tokens=spec.k + 1, tree_widths=spec.fan_out.budget)


def _build_draft_model(spec: DraftSpec):
    """The draft's native model: from its checkpoint, or (--random-weights) its published shape's random weights,
    drawn exactly as the target's process draws them."""
    from ssdbench.models.recipe import build_model

    return build_model(spec.recipe, flag="--draft")


def _record_to(box: mb.Mailbox):
    return lambda kind, start_ns, end_ns: box.record_event(kind, start_ns, end_ns)


def _loop(box: mb.Mailbox, speculator) -> None:
    parent = multiprocessing.parent_process()
    is_alive = parent.is_alive if parent is not None else (lambda: True)
    answered, last_answer_ns, last_request_ns, build_ms = 0, None, None, 0.0
    while True:
        if not box.wait_for(mb.REQ_SEQ, answered + 1, is_alive=is_alive):
            return  # the verifier is gone
        # Both from the request's posting time: a build that overran the verify noticed the request late,
        # and timing the round from then counted the overrun as verify time (a bigger tree then "fit").
        seq, now_ns = answered + 1, box.request_ns()
        period_ms = None if last_request_ns is None else (now_ns - last_request_ns) / 1e6
        if last_answer_ns is not None:
            speculator.costs.note_round(max(now_ns - last_answer_ns, 0) / 1e6)
        kind = int(box.ctrl[mb.REQ_KIND])
        if kind == mb.KIND_STOP:
            box.post_response(seq)
            return
        if kind == mb.KIND_PING:
            _answer_ping(box, speculator)
            box.post_response(seq)
            answered = seq
            continue
        if kind == mb.KIND_BATCH:
            _start_batch(box, speculator)
            last_answer_ns = last_request_ns = None
        else:
            answer_start_ns, last_request_ns = time.time_ns(), now_ns
            _answer_round(box, speculator, build_ms, period_ms)
            last_answer_ns = time.monotonic_ns()
            box.record_event("answer", answer_start_ns, time.time_ns())
        box.post_response(seq)
        answered = seq
        stats = speculator.build(should_stop=lambda: box.has_request(answered))
        build_ms = stats.glue_ms + stats.tree_ms
        box.times[2], box.times[3] = stats.glue_ms, stats.tree_ms


def _start_batch(box: mb.Mailbox, speculator) -> None:
    from ssdbench.sampling.params import RowSampling

    num_rows = int(box.ctrl[mb.NUM_ROWS])
    lens = box.prompt_lens[:num_rows].tolist()
    prompts = [box.prompts[b, : lens[b]].tolist() for b in range(num_rows)]
    sampling = RowSampling(temperature=box.temperature[:num_rows].clone(), top_p=box.top_p[:num_rows].clone(),
                           top_k=(0,) * num_rows)
    speculator.start_batch(prompts, sampling, max_len=int(box.ctrl[mb.MAX_LEN]))


def _answer_round(box: mb.Mailbox, speculator, build_ms: float, period_ms: float | None) -> None:
    num_rows = int(box.ctrl[mb.NUM_ROWS])
    answer = speculator.answer(read_outcomes(box, num_rows), period_ms=period_ms)
    write_answer(box, answer, busy_ms=build_ms + answer.backup_ms)
    box.fence()


def _answer_ping(box: mb.Mailbox, speculator) -> None:
    """The round-trip probe: one row of q-rows (or tokens) from the draft's device into the payload, as an answer moves."""
    device = speculator.draft.device
    if box.q.numel() > 1:
        box.q[0] = torch.zeros(box.q.shape[1:], device=device)  # [K, V]
    else:
        box.tokens[0] = torch.zeros(box.tokens.shape[1:], dtype=torch.int64, device=device)  # [K]
    box.fence()
