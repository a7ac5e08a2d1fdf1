"""sd's draft takes the prompt with its first catch-up chunk: the target's first token is committed (and a
server streams it) after the target's prefill alone, and the draft still drafts from the whole prompt."""

from __future__ import annotations

import torch
from decode_helpers import decode, make_proposer
from tiny_models import native, tiny_llama_config, tiny_state_dict

PROMPTS = [[3, 9, 27, 17, 40, 8, 1], [5, 11, 2]]


class CountingModel:
    """A draft that counts the token rows each forward puts through it."""

    def __init__(self, model) -> None:
        self.model, self.rows = model, []

    def __getattr__(self, name):
        return getattr(self.model, name)

    def forward(self, tokens, positions, **kwargs):
        self.rows.append(tokens.shape[1])
        return self.model.forward(tokens, positions, **kwargs)

    __call__ = forward


def pair():
    config = tiny_llama_config()
    return native(config, tiny_state_dict(config, seed=4)), native(config, tiny_state_dict(config, seed=5))


def test_the_first_token_is_committed_before_the_draft_sees_the_prompt():
    target, draft = pair()
    counting = CountingModel(draft)
    proposer = make_proposer("sd", counting, k=3, num_rows=len(PROMPTS), generator=None)
    forwards_at_first_token = []

    def on_round(batch):
        if batch.round_idx == 0:
            forwards_at_first_token.append(len(counting.rows))

    batch, _ = decode(target, proposer, PROMPTS, max_new_tokens=9, k=3, on_round=on_round)
    assert forwards_at_first_token == [0]
    # the first catch-up chunk is the longest prompt and its first token, in one forward
    assert counting.rows[0] == max(len(p) for p in PROMPTS) + 1


def test_a_draft_that_takes_the_prompt_late_drafts_as_one_that_took_it_first():
    """The same greedy tokens as ar, and every draft accepted where the draft is the target itself."""
    target, draft = pair()
    ar, _ = decode(target, None, PROMPTS, max_new_tokens=12, k=3)
    sd, steps = decode(target, make_proposer("sd", target_copy(), k=3, num_rows=len(PROMPTS), generator=None),
                       PROMPTS, max_new_tokens=12, k=3)
    assert [row.tokens for row in sd.rows] == [row.tokens for row in ar.rows]
    assert all(step.accepted == step.proposed for step in steps if step.proposed)


def target_copy():
    config = tiny_llama_config()
    return native(config, tiny_state_dict(config, seed=4))
