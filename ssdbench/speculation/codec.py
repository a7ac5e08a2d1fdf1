"""The one conversion of what crosses the ssd channel: last round's outcomes (verifier -> draft
process) and the speculator's `Answer` (into the mailbox, out of it, or straight into a
`Proposal` in-process). Each column is named once here, and so is each backup's code
(docs/DESIGN.md §5.2).
"""

from __future__ import annotations

import torch

from ssdbench.decoding.protocols import Proposal
from ssdbench.speculation import mailbox as mb
from ssdbench.speculation.speculator import Answer

BACKUP_CODES = {None: 0, "jit": 1, "fast": 2}  # how a missed row's proposal was made (None: a hit)
BACKUP_NAMES = {code: name for name, code in BACKUP_CODES.items()}
META_COLUMNS = ("depth", "hit", "backup", "fan_out")  # the mailbox's meta [B, 4], in this order
DEPTH, HIT, BACKUP, FAN_OUT = range(len(META_COLUMNS))
BUSY_MS, BACKUP_MS = 0, 1  # the mailbox's times: draft busy since the last answer, backup work
OUTCOME_COLUMNS = ("active", "accepted", "bonus")  # the mailbox's outcomes [B, 3], in this order

Outcome = tuple[bool, int, int]  # (row still active, drafts accepted last round, the pending bonus token)


def write_outcomes(box: mb.Mailbox, outcomes: list[Outcome]) -> None:
    """Verifier: last round's outcome per row, for the draft process to answer from."""
    box.outcomes[: len(outcomes)] = torch.tensor([[int(a), k, t] for a, k, t in outcomes], dtype=torch.int64)


def read_outcomes(box: mb.Mailbox, num_rows: int) -> list[Outcome]:
    """Draft process: the outcomes the verifier wrote."""
    return [(bool(a), int(k), int(t)) for a, k, t in box.outcomes[:num_rows].tolist()]


def write_forks(box: mb.Mailbox, branches) -> None:
    """Draft process (synthetic hits only): the (k, bonus) of every branch the tree is about to grow, per row,
    announced under the sequence number of the response just posted."""
    forks = torch.full(box.forks.shape, -1, dtype=torch.int64)  # [B, budget, 2]
    for b, row in enumerate(branches):
        for n, branch in enumerate(row[: forks.shape[1]]):
            forks[b, n, 0], forks[b, n, 1] = branch.accepted, branch.bonus
    box.forks.copy_(forks)
    box.ctrl[mb.FORK_SEQ] = int(box.ctrl[mb.RESP_SEQ])


def read_held_bonuses(box: mb.Mailbox, num_accepted: list[int]) -> list[list[int]]:
    """Verifier: per row, the bonus tokens posted for its accepted count."""
    forks = box.forks[: len(num_accepted)].tolist()  # [B][budget][2]
    return [[t for k, t in row if k == accepted] for row, accepted in zip(forks, num_accepted)]


def ssd_extras(hit, backup, fan_out) -> dict[str, tuple]:
    """ssd's per-row telemetry, under the steps table's column names."""
    return {"cache_hit": tuple(bool(h) for h in hit), "backup": tuple(backup),
            "fan_out_total": tuple(int(f) for f in fan_out)}


def proposal_from_answer(answer: Answer, *, draft_ms: float, wait_ms: float) -> Proposal:
    """In-process: the answer as the round loop's proposal."""
    return Proposal(tokens=answer.tokens, q=answer.q, num_proposed=torch.tensor(answer.depth, dtype=torch.int64),
                    draft_ms=draft_ms, wait_ms=wait_ms, extras=ssd_extras(answer.hit, answer.backup, answer.fan_out))


def write_answer(box: mb.Mailbox, answer: Answer, *, busy_ms: float) -> None:
    """Draft process: the answer into the mailbox's rows (read in place by `read_proposal`)."""
    n = len(answer.depth)
    box.tokens[:n] = answer.tokens
    meta = torch.zeros(n, len(META_COLUMNS), dtype=torch.int64)  # [B, 4]
    meta[:, DEPTH] = torch.tensor(answer.depth, dtype=torch.int64)
    meta[:, HIT] = torch.tensor([int(h) for h in answer.hit], dtype=torch.int64)
    meta[:, BACKUP] = torch.tensor([BACKUP_CODES[b] for b in answer.backup], dtype=torch.int64)
    meta[:, FAN_OUT] = torch.tensor(answer.fan_out, dtype=torch.int64)
    box.meta[:n] = meta
    if answer.q is not None:
        box.q[:n] = answer.q
    box.ctrl[mb.HAS_Q] = int(answer.q is not None)
    box.times[BUSY_MS], box.times[BACKUP_MS] = busy_ms, answer.backup_ms


def read_proposal(box: mb.Mailbox, num_rows: int, *, wait_ms: float) -> Proposal:
    """Verifier: the answer the draft process wrote, as the round loop's proposal."""
    meta = box.meta[:num_rows].T.tolist()  # [4][B]
    q = box.q[:num_rows] if int(box.ctrl[mb.HAS_Q]) else None  # read in place: not rewritten before the next request
    return Proposal(
        tokens=box.tokens[:num_rows].clone(), q=q, num_proposed=torch.tensor(meta[DEPTH], dtype=torch.int64),
        draft_ms=float(box.times[BUSY_MS]), wait_ms=wait_ms,
        extras=ssd_extras(meta[HIT], [BACKUP_NAMES[c] for c in meta[BACKUP]], meta[FAN_OUT]),
    )
