"""One codec for ssd's answers: through the mailbox, the verifier reads what the in-process path builds."""

from __future__ import annotations

import pytest
import torch

from ssdbench.speculation import mailbox as mb
from ssdbench.speculation.codec import proposal_from_answer, read_outcomes, read_proposal, write_answer, write_outcomes
from ssdbench.speculation.speculator import Answer


@pytest.mark.parametrize("with_q", [False, True])
def test_an_answer_reads_back_as_the_in_process_proposal(with_q):
    generator = torch.Generator().manual_seed(0)
    q = torch.rand(3, 4, 11, generator=generator) if with_q else None  # [B, K, V]
    answer = Answer(tokens=torch.randint(0, 11, (3, 4), generator=generator), depth=[4, 2, 0], q=q,
                    hit=[True, False, False], backup=[None, "jit", "fast"], fan_out=[6, 0, 3], backup_ms=1.5)
    box = mb.Mailbox.create(num_rows=3, max_prompt=5, k=4, vocab_size=11, with_q=with_q)
    write_answer(box, answer, busy_ms=7.25)
    read = read_proposal(box, 3, wait_ms=0.5)
    local = proposal_from_answer(answer, draft_ms=7.25, wait_ms=0.5)
    assert torch.equal(read.tokens, local.tokens) and torch.equal(read.num_proposed, local.num_proposed)
    assert read.extras == local.extras == {"cache_hit": (True, False, False), "backup": (None, "jit", "fast"),
                                           "fan_out_total": (6, 0, 3)}
    assert (read.draft_ms, read.wait_ms) == (local.draft_ms, local.wait_ms)
    assert (read.q is None) == (q is None) and (q is None or torch.equal(read.q, q))


def test_outcomes_read_back_as_written():
    box = mb.Mailbox.create(num_rows=3, max_prompt=5, k=4, vocab_size=11, with_q=False)
    outcomes = [(True, 2, 9), (False, 0, 4), (True, 4, 10)]
    write_outcomes(box, outcomes)
    assert read_outcomes(box, 3) == outcomes
