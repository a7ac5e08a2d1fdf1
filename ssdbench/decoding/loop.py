"""The one round loop every method shares: propose, verify, commit (docs/DESIGN.md §2)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from ssdbench.decoding.batch import DecodeBatch
from ssdbench.decoding.protocols import CausalModel, Proposal, Proposer, VerifyOutput, empty_proposal
from ssdbench.decoding.ragged import forward_chunks, forward_last, last_logits
from ssdbench.profiling.clock import PhaseClock
from ssdbench.profiling.devices import same_device
from ssdbench.sampling.accept import Verdict, verify_proposal
from ssdbench.sampling.params import RowSampling
from ssdbench.sampling.probs import logits_to_probs, sample_from


@dataclass(slots=True)
class StepRecord:
    """One round of one row; the columns of steps.parquet that the loop knows."""

    row: int
    round: int
    batch_size: int
    proposed: int
    accepted: int
    emitted: int
    bonus_token: int
    t_start_ns: int
    draft_ms: float
    verify_ms: float
    wait_ms: float
    sample_ms: float
    step_ms: float
    extras: dict = field(default_factory=dict)  # the proposer's own columns for this row (ssd: cache_hit, ...)


@dataclass
class BatchTiming:
    """Wall-clock instants of a batch, for TTFT / decode time per row."""

    start_ns: int
    first_token_ns: int
    row_end_ns: list[int]


def decode_batch(
    target: CausalModel,
    proposer: Proposer | None,
    batch: DecodeBatch,
    sampling: RowSampling,
    generator: torch.Generator | None,
    *,
    verify: Callable[..., Verdict] = verify_proposal,
    rounds: list[StepRecord] | None = None,
    on_round: Callable[[DecodeBatch], None] | None = None,
) -> tuple[BatchTiming, list[StepRecord]]:
    """Decode every row of `batch` to completion. Rows' tokens are updated in place.

    `verify` is the acceptance rule; only tests swap it (for a deliberately biased one).
    `rounds`, if given, receives each round's records as it completes (and is the list returned),
    so a caller still has the batch's measured rounds when decoding stops part-way.
    `on_round`, if given, sees the batch after the prefill and after every round: a server streams the
    tokens committed since, and may end rows there (RowState.end: a stop string, a client gone).
    """
    target.allocate(batch.size, batch.max_len)
    start_ns = time.perf_counter_ns()
    if proposer is not None:  # first, so that a draft on its own device prefills while the target does
        proposer.prefill(batch)
    prompt_output = _prefill(target, batch, sampling, generator, hidden=getattr(proposer, "wants_hidden", False))
    if proposer is not None:
        proposer.observe_prefill(batch, prompt_output)
    first_token_ns = time.perf_counter_ns()
    if on_round is not None:
        on_round(batch)
    row_end_ns = [first_token_ns if row.is_finished else 0 for row in batch.rows]
    steps: list[StepRecord] = [] if rounds is None else rounds
    clock = PhaseClock(target.device)
    while not batch.is_done:
        batch.round_idx += 1
        steps.extend(_run_round(target, proposer, batch, sampling, generator, clock, verify))
        if on_round is not None:
            on_round(batch)
        now = time.perf_counter_ns()
        for i, row in enumerate(batch.rows):
            if row.is_finished and row_end_ns[i] == 0:
                row_end_ns[i] = now
    return BatchTiming(start_ns, first_token_ns, row_end_ns), steps


def _prefill(target: CausalModel, batch: DecodeBatch, sampling: RowSampling, generator, *,
             hidden: bool) -> VerifyOutput:
    """Forward every prompt and draw each row's first token from the target; returns the prompts' output."""
    prompts = [row.prompt_ids for row in batch.rows]
    if hidden:  # a proposer reading the target's states gets every prompt row's
        output = VerifyOutput(*forward_chunks(target, prompts, [0] * batch.size, return_hidden=True))
        final = last_logits(output.logits, [len(p) for p in prompts]).unsqueeze(1)  # [B, 1, V]
    else:  # one token is drawn: the lm_head reads each prompt's last row only
        final = forward_last(target, prompts, [0] * batch.size).unsqueeze(1)  # [B, 1, V]
        output = VerifyOutput(final)
    if sampling.all_greedy:
        first = final[:, 0].argmax(dim=-1)  # [B]
    else:
        first = sample_from(logits_to_probs(final, sampling)[:, 0], generator)  # [B]
    for row, token in zip(batch.rows, first.tolist()):
        row.commit([token], round_idx=0)
    return output


def _run_round(
    target: CausalModel,
    proposer: Proposer | None,
    batch: DecodeBatch,
    sampling: RowSampling,
    generator,
    clock: PhaseClock,
    verify: Callable[..., Verdict],
) -> list[StepRecord]:
    active = batch.active
    clock.start()
    proposal = proposer.propose(batch) if proposer is not None else empty_proposal(batch.size, target.device)
    _finish_elsewhere(proposal, target.device)
    clock.mark("proposed")
    output = _verify_forward(target, batch, proposal, hidden=getattr(proposer, "wants_hidden", False))
    logits = output.logits  # [B, 1+W, V]
    clock.mark("verified")
    width = logits.shape[1] - 1
    dev = logits.device  # proposals may come from another device or process (n-gram on CPU, ssd's mailbox)
    q = _q_columns(proposal, width)
    verdict = verify(
        logits, proposal.tokens[:, :width].to(dev), None if q is None else q.to(dev), proposal.num_proposed.to(dev),
        sampling, generator,
    )
    num_accepted, next_token = verdict.num_accepted.tolist(), verdict.next_token.tolist()
    clock.mark("sampled")
    emitted = _commit(batch, proposal, num_accepted, next_token)
    if proposer is not None:
        proposer.observe(batch, verdict, output)
    clock.mark("end")
    clock.resolve()
    return _records(batch, active, proposal, num_accepted, next_token, emitted, clock)


def _finish_elsewhere(proposal: Proposal, device) -> None:
    """A draft on another GPU (--sd-draft-device) runs outside the target's stream, whose events time
    the round: wait for it here, or its drafting would be timed as the verify (the next step reads the
    drafts to the host anyway)."""
    where = proposal.tokens.device
    if where.type == "cuda" and not same_device(where, device):
        torch.cuda.synchronize(where)


def _verify_forward(target: CausalModel, batch: DecodeBatch, proposal: Proposal, *, hidden: bool) -> VerifyOutput:
    """One target forward over [pending, x_1..x_W] per row, at the row's next positions
    (with the hidden states the lm_head read, when the proposer asks for them)."""
    width = proposal.width
    drafts = proposal.tokens[:, :width].tolist()
    chunks, starts = [], []
    for i, row in enumerate(batch.rows):
        # a finished row rides along with padding, written past its committed slots
        chunks.append([row.tokens[-1]] * (width + 1) if row.is_finished else [row.tokens[-1]] + drafts[i])
        starts.append(row.target_len)
    if hidden:
        return VerifyOutput(*forward_chunks(target, chunks, starts, return_hidden=True))
    return VerifyOutput(forward_chunks(target, chunks, starts))


def _q_columns(proposal: Proposal, width: int) -> torch.Tensor | None:
    return None if proposal.q is None else proposal.q[:, :width]


def _commit(batch: DecodeBatch, proposal: Proposal, num_accepted: list[int], next_token: list[int]) -> list[int]:
    drafts = proposal.tokens.tolist()
    emitted = [0] * batch.size
    for i in batch.active:
        n = num_accepted[i]
        emitted[i] = batch.rows[i].commit(drafts[i][:n] + [next_token[i]], batch.round_idx)
    return emitted


def _records(batch, active, proposal, num_accepted, next_token, emitted, clock) -> list[StepRecord]:
    draft_ms = proposal.draft_ms if proposal.draft_ms else clock.elapsed_ms("start", "proposed")
    verify_ms = clock.elapsed_ms("proposed", "verified")
    sample_ms = clock.elapsed_ms("verified", "sampled")
    step_ms = clock.elapsed_ms("start", "end")
    num_proposed = proposal.num_proposed.tolist()
    records = []
    for i in active:
        records.append(
            StepRecord(
                row=i, round=batch.round_idx, batch_size=batch.size, proposed=num_proposed[i],
                accepted=num_accepted[i], emitted=emitted[i], bonus_token=next_token[i],
                extras={name: values[i] for name, values in proposal.extras.items()},
                t_start_ns=clock.t_start_ns, draft_ms=draft_ms, verify_ms=verify_ms,
                wait_ms=proposal.wait_ms, sample_ms=sample_ms, step_ms=step_ms,
            )
        )
    return records
