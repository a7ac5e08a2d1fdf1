"""Greedy `sd` must be token-identical to `ar`: every batch size, K, draft kind, finish pattern."""

from __future__ import annotations

import pytest

from decode_helpers import decode, make_proposer
from tiny_models import tiny_pair

PROMPTS = [[1, 5, 9, 1, 5], [3, 3, 8], [4, 11, 12, 13, 14, 15, 16], [2, 6], [9, 8, 7, 6, 5, 4]]


def _outputs(batch):
    return [row.output_ids for row in batch.rows]


EOS = {44}  # rows stop at different rounds when they emit it


@pytest.fixture(scope="module")
def pair():
    return tiny_pair(vocab=48, seed=1, draft="noisy")


@pytest.mark.parametrize("batch_size", [1, 2, 4])
@pytest.mark.parametrize("k", [1, 3, 5])
@pytest.mark.parametrize("draft_kind", ["int8", "noisy", "ngram"])
def test_sd_greedy_matches_ar(pair, batch_size, k, draft_kind):
    target, noisy = pair
    draft = tiny_pair(vocab=48, seed=1, draft="int8")[1] if draft_kind == "int8" else noisy
    prompts = PROMPTS[:batch_size]
    ar, _ = decode(target, None, prompts, max_new_tokens=24, k=0, eos_ids=EOS)
    proposer = make_proposer("ngram" if draft_kind == "ngram" else "model", draft, k=k, num_rows=batch_size, generator=None)
    sd, steps = decode(target, proposer, prompts, max_new_tokens=24, k=k, eos_ids=EOS)
    assert _outputs(sd) == _outputs(ar)
    assert [r.finish_reason for r in sd.rows] == [r.finish_reason for r in ar.rows]
    # the proposals were really used: drafts were made, and a model draft's accepted
    assert sum(s.proposed for s in steps) > 0
    if draft_kind != "ngram":
        assert sum(s.accepted for s in steps) > 0
    if draft_kind == "noisy":  # and rejected: both verification paths ran
        assert sum(s.proposed - s.accepted for s in steps) > 0


def test_rows_finish_at_different_rounds(pair):
    target, draft = pair
    prompts = PROMPTS[:4]
    sd, steps = decode(target, make_proposer("model", draft, k=3, num_rows=4, generator=None), prompts,
                       max_new_tokens=24, k=3, eos_ids=EOS)
    assert len({row.finish_round for row in sd.rows}) > 1
    # every step row belongs to a row that was still active in that round
    for step in steps:
        assert step.round <= sd.rows[step.row].finish_round


def test_emitted_counts_add_up(pair):
    target, draft = pair
    sd, steps = decode(target, make_proposer("model", draft, k=4, num_rows=2, generator=None), PROMPTS[:2],
                       max_new_tokens=17, k=4)
    for i, row in enumerate(sd.rows):
        emitted = sum(s.emitted for s in steps if s.row == i)
        assert emitted + 1 == row.num_new == 17  # +1: the first token comes from prefill
        assert all(s.accepted <= s.proposed for s in steps)
