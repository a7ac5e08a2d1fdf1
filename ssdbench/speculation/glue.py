"""The glue pass, done with as little new work as possible.

After answering, the draft's main line must hold K/V for [t, y_1..y_d] (the tokens just
sent) and the d+1 distributions that the fork branches on. Much of that already exists:
- after a cache hit, the branch computed K/V for t, y_1..y_{d-1} in its tree slots, with
  exactly the main line's context and positions, and the distributions D_0..D_{d-1};
- after a jit backup, the main line already holds t, y_1..y_{K-1} and D_0..D_{K-1}.
Then glue is a slot copy plus a one-token forward for y_d. Only n-gram proposals and the
first round need a full forward over [t, y_1..y_d].
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ssdbench.decoding.protocols import TreeModel
from ssdbench.decoding.ragged import forward_chunks


@dataclass(frozen=True)
class GluePlan:
    chunk: list[int]  # tokens still to forward on the main line
    start: int  # the position of chunk[0]
    known_logits: torch.Tensor | None  # [j, V] distributions already computed, before the chunk's
    copy_slots: tuple[list[int], list[int]] | None = None  # (tree slots, main-line slots) to copy K/V
    fork_rows: int = 0  # full plans: how many trailing rows (t, y_1..y_d) the fork branches on


def full_plan(history: list[int], returned: list[int], main_valid: int) -> GluePlan:
    """Forward what the main line lacks: history[main_valid:] (ending with t), then y_1..y_d."""
    main_valid = min(main_valid, len(history) - 1)
    return GluePlan(chunk=history[main_valid:] + returned, start=main_valid, known_logits=None,
                    fork_rows=len(returned) + 1)


def reuse_plan(history: list[int], returned: list[int], known_logits: torch.Tensor,
               tree_slots: list[int] | None) -> GluePlan:
    """Forward only y_d; D_0..D_{d-1} are known; copy t, y_1..y_{d-1} from the tree when given."""
    d, pending = len(returned), len(history) - 1
    copy = None if tree_slots is None else (tree_slots, list(range(pending, pending + d)))
    return GluePlan(chunk=[returned[-1]], start=pending + d, known_logits=known_logits, copy_slots=copy)


def run_glue(draft: TreeModel, plans: list[GluePlan | None], idle_starts: list[int]) -> list[torch.Tensor | None]:
    """Execute every row's plan in one forward; per row: fork logits [d+1, V] (None: inactive row).

    Inactive rows (plan None) forward one padding token at idle_starts[b], past their committed slots.
    """
    for b, plan in enumerate(plans):
        if plan is not None and plan.copy_slots is not None:
            src, dst = (torch.tensor(s, device=draft.device) for s in plan.copy_slots)
            draft.copy_slots(b, src, dst)
    chunks = [plan.chunk if plan is not None else [0] for plan in plans]
    starts = [plan.start if plan is not None else idle for plan, idle in zip(plans, idle_starts)]
    if all(plan is None for plan in plans):
        return [None] * len(plans)
    logits = forward_chunks(draft, chunks, starts)  # [B, T, V]
    out = []
    for b, plan in enumerate(plans):
        if plan is None:
            out.append(None)
            continue
        fresh = logits[b, : len(plan.chunk)]  # [len, V]
        if plan.known_logits is None:  # the fork needs the rows after t, y_1..y_d: the chunk's last d+1
            out.append(fresh[-plan.fork_rows :])
        else:
            out.append(torch.cat([plan.known_logits, fresh[-1:]]))
    return out
