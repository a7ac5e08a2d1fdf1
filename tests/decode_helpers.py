"""Drive the real round loop directly, without the CLI, for exactness tests."""

from __future__ import annotations

import torch

from ssdbench.decoding.batch import new_batch
from ssdbench.decoding.draft_model import DraftModelProposer
from ssdbench.decoding.loop import decode_batch
from ssdbench.decoding.ngram import NgramProposer
from ssdbench.sampling.params import RowSampling, SamplingParams


def sampling_rows(num_rows: int, temperature, top_p: float = 1.0) -> RowSampling:
    """temperature: one value for every row, or a list with one per row."""
    temps = temperature if isinstance(temperature, (list, tuple)) else [temperature] * num_rows
    return RowSampling.from_params([SamplingParams(temperature=t, top_p=top_p) for t in temps])


def make_proposer(kind, draft, *, k: int, num_rows: int, generator, draft_temperature: float = 0.0, top_p: float = 1.0):
    if kind == "ar":
        return None
    if kind == "ngram":
        return NgramProposer(k=k)
    return DraftModelProposer(draft, k=k, sampling=sampling_rows(num_rows, draft_temperature, top_p), generator=generator)


def decode(target, proposer, prompts, *, max_new_tokens: int, k: int, temperature: float = 0.0, top_p: float = 1.0,
           eos_ids=frozenset(), seed: int = 0, generator=None, **loop_kwargs):
    """Returns (batch, steps) after decoding `prompts` together."""
    batch = new_batch(prompts, max_new_tokens=max_new_tokens, eos_ids=frozenset(eos_ids), k=k)
    generator = generator or torch.Generator().manual_seed(seed)
    _, steps = decode_batch(target, proposer, batch, sampling_rows(len(prompts), temperature, top_p), generator, **loop_kwargs)
    return batch, steps


def ssd_local(draft, *, k: int, num_rows: int, fan_out: str = "3", fan_out_list=None, miss_list=None, backup: str = "jit",
              saguaro_c: float = 1.0, draft_temperature=0.0, top_p: float = 1.0, generator=None):
    """SSD's real speculator, run in this process (no concurrency) so tests are deterministic."""
    from ssdbench.speculation.fan_out import build_fan_out
    from ssdbench.speculation.local import LocalSsdProposer
    from ssdbench.speculation.speculator import Speculator

    policy = build_fan_out(fan_out, k=k, fan_out_list=fan_out_list, miss_list=miss_list)
    speculator = Speculator(draft, k=k, fan_out=policy, backup=backup, saguaro_c=saguaro_c,
                            generator=generator or torch.Generator().manual_seed(123))
    return LocalSsdProposer(speculator, sampling_rows(num_rows, draft_temperature, top_p))


def cut_trees_short(proposer, steps: int):
    """Every tree the proposer's speculator builds stops after `steps` steps, as if the verifier's next
    request had arrived then (the concurrent draft's `should_stop`), so hits come back shallower than K."""
    speculator = proposer.speculator
    build = speculator.build

    def build_cut_short(should_stop=None):
        checks = iter(range(1 << 30))  # the first check comes before the tree, then one after each step
        return build(should_stop=lambda: next(checks) >= steps)

    speculator.build = build_cut_short
    return proposer
