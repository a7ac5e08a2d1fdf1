"""The proposer seam: what the verify forward hands back (logits, hidden states on request) and
the verdict `observe` receives, on the real round loop."""

from __future__ import annotations

import pytest
import torch
from decode_helpers import decode
from tiny_models import native, tiny_llama_config, tiny_state_dict

from ssdbench.decoding.draft_model import DraftModelProposer
from ssdbench.decoding.ragged import forward_chunks
from ssdbench.models.hf_engine import HfCausalLM
from ssdbench.sampling.params import RowSampling, SamplingParams

PROMPTS = [[3, 9, 27, 17, 40], [5, 11, 2]]


class Watching(DraftModelProposer):
    """sd's draft, recording what each round's observe was given."""

    name = "watching"

    def __init__(self, draft, *, wants_hidden: bool, k: int) -> None:
        sampling = RowSampling.from_params([SamplingParams()] * len(PROMPTS))
        super().__init__(draft, k=k, sampling=sampling, generator=None)
        self.wants_hidden = wants_hidden
        self.seen = []
        self.prefill_output = None

    def observe_prefill(self, batch, output) -> None:
        self.prefill_output = output

    def observe(self, batch, verdict, output) -> None:
        super().observe(batch, verdict, output)
        self.seen.append((verdict.num_accepted.tolist(), output))


@pytest.fixture(scope="module")
def pair():
    config = tiny_llama_config()
    return native(config, tiny_state_dict(config, seed=4)), native(config, tiny_state_dict(config, seed=5))


@pytest.mark.parametrize("wants_hidden", [False, True])
def test_observe_gets_the_verdict_and_the_targets_output(pair, wants_hidden):
    target, draft = pair
    proposer = Watching(draft, wants_hidden=wants_hidden, k=3)
    batch, steps = decode(target, proposer, PROMPTS, max_new_tokens=12, k=3)
    assert len(proposer.seen) == batch.round_idx
    accepted_by_round = {}
    for step in steps:
        accepted_by_round.setdefault(step.round, {})[step.row] = step.accepted
    for round_idx, (accepted, output) in enumerate(proposer.seen, start=1):
        assert {row: accepted[row] for row in accepted_by_round[round_idx]} == accepted_by_round[round_idx]
        assert output.logits.shape[:2] == (len(PROMPTS), 4)  # pending token + K proposals
        if not wants_hidden:
            assert output.hidden is None
            continue
        # the lm_head applied to the hidden states gives back the logits the verdict was drawn from
        assert output.hidden.shape == (len(PROMPTS), 4, target.shape.hidden)
        assert torch.allclose(target.lm_head(output.hidden).float(), output.logits, atol=1e-5)


def test_hidden_states_mean_the_same_on_both_engines(tiny):
    """Native and transformers' code hand back the same final-norm'd hidden states for the same tokens."""
    from ssdbench.models.model_set import ModelSet, ModelSettings

    models = ModelSet(ModelSettings(target=str(tiny), engines=("native", "hf")))
    chunks = [PROMPTS[0], PROMPTS[1] + [0, 0]]
    outputs = {}
    for engine in ("native", "hf"):
        model = models.target(engine)
        model.allocate(2, 16)
        outputs[engine] = forward_chunks(model, chunks, [0, 0], return_hidden=True)
    assert isinstance(models.target("hf"), HfCausalLM)
    (native_logits, native_hidden), (hf_logits, hf_hidden) = outputs["native"], outputs["hf"]
    assert torch.allclose(native_hidden, hf_hidden.float(), atol=1e-4)
    assert torch.allclose(native_logits, hf_logits, atol=1e-4)


def test_observe_prefill_gets_the_prompts_hidden_states_on_request(pair):
    """An EAGLE-style draft starts from the target's states over the prompt: handed over after the prefill."""
    target, draft = pair
    proposer = Watching(draft, wants_hidden=True, k=2)
    decode(target, proposer, PROMPTS, max_new_tokens=4, k=2)
    output = proposer.prefill_output
    width = max(len(p) for p in PROMPTS)
    assert output.logits.shape[:2] == output.hidden.shape[:2] == (len(PROMPTS), width)
    assert torch.allclose(target.lm_head(output.hidden).float(), output.logits, atol=1e-5)
    fresh = native_copy_forward(target, PROMPTS[0])  # the first row, alone, from an empty cache
    assert torch.allclose(output.hidden[0, : len(PROMPTS[0])], fresh, atol=1e-5)


def native_copy_forward(model, prompt):
    model.allocate(1, 32)
    _, hidden = model.forward(torch.tensor([prompt]), torch.arange(len(prompt))[None], return_hidden=True)
    return hidden[0]  # [T, H]


@pytest.mark.parametrize("engine", ["native", "hf"])
def test_forward_last_is_each_rows_last_logits_of_the_whole_forward(tiny, engine):
    """A prefill and a catch-up chunk read one row's logits: the same as the full forward's last real row,
    whether the model picks columns (native: logits_at) or returns every row (transformers' code)."""
    from ssdbench.decoding.ragged import forward_last, last_logits
    from ssdbench.models.model_set import ModelSet, ModelSettings

    model = ModelSet(ModelSettings(target=str(tiny), engines=("native", "hf"))).target(engine)
    chunks, starts = [PROMPTS[0], PROMPTS[1]], [0, 0]
    model.allocate(2, 16)
    whole = last_logits(forward_chunks(model, chunks, starts), [len(c) for c in chunks])  # [B, V]
    model.allocate(2, 16)
    last = forward_last(model, chunks, starts)  # [B, V]
    assert last.shape == whole.shape == (2, model.vocab_size)
    assert torch.allclose(last, whole, atol=1e-5)
    assert not torch.allclose(last[0], last[1], atol=1e-3)  # two prompts, two distributions: rows not mixed up


def test_the_prefill_hands_over_each_prompts_last_logits_without_hidden_states(pair):
    target, draft = pair
    proposer = Watching(draft, wants_hidden=False, k=2)
    batch, _ = decode(target, proposer, PROMPTS, max_new_tokens=4, k=2)
    output = proposer.prefill_output
    assert output.hidden is None and output.logits.shape == (len(PROMPTS), 1, target.vocab_size)
    fresh = native_copy_forward_logits(target, PROMPTS[1])
    assert torch.allclose(output.logits[1, 0], fresh[-1], atol=1e-5)


def native_copy_forward_logits(model, prompt):
    model.allocate(1, 32)
    return model.forward(torch.tensor([prompt]), torch.arange(len(prompt))[None])[0]  # [T, V]
