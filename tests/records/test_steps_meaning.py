"""steps.parquet's `round` and `bonus_token` hold what records/schema.py says, on real decoding."""

from __future__ import annotations

from decode_helpers import decode, make_proposer
from ssdbench.records.schema import DESCRIPTIONS
from tiny_models import tiny_pair

PROMPTS = [[5, 9, 13, 5, 9], [3, 3, 8], [40, 41, 42, 43], [2, 6, 10]]


def test_rounds_count_from_one_and_the_bonus_is_an_output_token_only_when_emitted():
    target, draft = tiny_pair(vocab=48, seed=1, draft="noisy")
    proposer = make_proposer("model", draft, k=3, num_rows=len(PROMPTS), generator=None)
    batch, steps = decode(target, proposer, PROMPTS, max_new_tokens=11, k=3)  # 11 = 1 + 10: cuts a round of 4
    cut = 0
    for i, row in enumerate(batch.rows):
        mine = sorted((s for s in steps if s.row == i), key=lambda s: s.round)
        assert [s.round for s in mine] == list(range(1, len(mine) + 1))
        position = 1  # the prefill (round 0) drew output token 0
        for s in mine:
            if s.emitted == s.accepted + 1:
                assert row.output_ids[position + s.accepted] == s.bonus_token
            else:
                cut += 1
                assert s is mine[-1] and s.emitted < s.accepted + 1
            position += s.emitted
        assert position == len(row.output_ids)
    assert cut > 0  # the token limit did cut a round short
    assert "counted from 1" in DESCRIPTIONS["steps"]["round"]
    assert "emitted == accepted + 1" in DESCRIPTIONS["steps"]["bonus_token"]
