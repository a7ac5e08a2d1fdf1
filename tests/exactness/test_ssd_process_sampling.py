"""Sampled `ssd` through its real draft process (shared memory, q-rows across processes) emits
exactly the target's distribution, with Saguaro C < 1 and the fast backup.

The draft process builds its tree concurrently and stops when the next request arrives, so
which rounds hit depends partly on timing; exactness must hold whatever the pattern. With a
3-token vocabulary a fan-out of 2 covers every outcome, so a fast draft process hits every
round (it did on CI); a fan-out of 1 leaves one outcome per position uncovered, so misses
(about a fifth of rounds) occur whatever the timing, and the test checks both happened.
False-rejection rate: ALPHA (exactness.py).
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pytest
import torch

from biased_rules import argmax_matching, uniform_bonus
from cli_fixtures import tiny_tokenizer
from decode_helpers import decode, sampling_rows
from exactness import ALPHA, chi_square_pvalue, exact_sequence_distribution
from test_sd_sampling import PROMPT, VOCAB, assert_every_path_ran, length_for
from tests.speculation.test_ssd_process import assert_ssd_records, spec_for, target_model
from tiny_models import tiny_llama_config, tiny_state_dict
from ssdbench.sampling.accept import verify_proposal
from ssdbench.speculation.client import DraftServer, RemoteSsdProposer

K = 3
ROWS, BATCHES = 400, 5  # 2000 samples
POWER_BATCHES = 3  # 1200 samples: 400 gave p = 0.003 for uniform_bonus once (timing decides the hit pattern)
SAGUARO_C = 0.3
FAN_OUT = "1"  # leaves outcomes uncovered: misses do not depend on the draft process being slow
TARGET_LAYERS, TARGET_HIDDEN = 4, 256

pytestmark = pytest.mark.usefixtures("one_thread")


def save_folder(folder: Path, state: dict, config) -> Path:
    """A model folder as a user would point at it: weights (safetensors) and a tokenizer."""
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM(config)
    model.load_state_dict(state)
    model.save_pretrained(folder)
    tiny_tokenizer(config.vocab_size).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> tuple[Path, Path]:
    """A peaked 3-token target, and a much smaller draft, so that the draft process builds its
    tree while the target verifies (with equal costs every request would cut the tree short)."""
    root = tmp_path_factory.mktemp("ssd-sampling")
    target_config = tiny_llama_config(vocab=VOCAB, layers=TARGET_LAYERS, hidden=TARGET_HIDDEN)
    draft_config = tiny_llama_config(vocab=VOCAB, layers=1, hidden=16)
    return (save_folder(root / "target", tiny_state_dict(target_config, seed=3, head_scale=8.0), target_config),
            save_folder(root / "draft", tiny_state_dict(draft_config, seed=4, head_scale=8.0), draft_config))


def draft_core() -> tuple[int, ...]:
    """One core for the draft process (one thread), the last this process may use."""
    return (max(os.sched_getaffinity(0)),) if hasattr(os, "sched_getaffinity") else None


def sample_remote(target, draft_folder: Path, *, batches: int, verify=verify_proposal):
    """Counts of emitted sequences and the round records, decoding through the draft process."""
    spec = spec_for(draft_folder, k=K, backup="fast", int8=False, saguaro_c=SAGUARO_C, cores=draft_core(),
                    fan_out=FAN_OUT)
    counts: Counter = Counter()
    all_steps = []
    with DraftServer(spec, num_rows=ROWS, max_prompt=len(PROMPT), vocab_size=VOCAB, with_q=True) as server:
        for b in range(batches):
            proposer = RemoteSsdProposer(server, sampling_rows(ROWS, 1.0))
            batch, steps = decode(target, proposer, [PROMPT] * ROWS, max_new_tokens=length_for(K), k=K,
                                  temperature=1.0, generator=torch.Generator().manual_seed(9000 + b), verify=verify)
            counts.update(tuple(row.output_ids) for row in batch.rows)
            all_steps.extend(steps)
    return counts, all_steps


def test_remote_ssd_sampling_matches_target_distribution(folders):
    target_folder, draft_folder = folders
    target = target_model(target_folder)
    exact = exact_sequence_distribution(target, PROMPT, length_for(K), temperature=1.0)
    counts, steps = sample_remote(target, draft_folder, batches=BATCHES)
    assert_ssd_records(steps, backups={"fast"})
    assert any(s.extras["cache_hit"] for s in steps) and any(not s.extras["cache_hit"] for s in steps)
    assert_every_path_ran(steps, K)
    assert chi_square_pvalue(counts, exact) > ALPHA


@pytest.mark.parametrize("rule", [argmax_matching, uniform_bonus])
def test_the_same_check_rejects_biased_rules(folders, rule):
    target_folder, draft_folder = folders
    target = target_model(target_folder)
    exact = exact_sequence_distribution(target, PROMPT, length_for(K), temperature=1.0)
    counts, _ = sample_remote(target, draft_folder, batches=POWER_BATCHES, verify=rule)
    assert chi_square_pvalue(counts, exact) < ALPHA
