"""What a GPU run decodes through: `GraphedModel`'s static shapes (attention over the whole cache,
masks built on the device) and its cache shared by every batch of one capacity (a smaller batch on
the first rows, zeroed in place, after the calls that capture every step shape at allocation).
Off CUDA the wrapper captures nothing and runs those calls eagerly, so the real round loop checks
them here: greedy ar, sd and ssd through wrapped models
emit what they emit through plain dynamic-shape models, batch after batch. (Capture and replay
themselves are checked on a GPU: tests/models/test_cuda_graphs.py, run by ci/gpu_check.sh.)"""

from __future__ import annotations

import pytest
import torch

from decode_helpers import make_proposer, sampling_rows, ssd_local
from ssdbench.decoding.batch import new_batch
from ssdbench.decoding.loop import decode_batch
from ssdbench.models.cuda_graphs import GraphedModel
from tiny_models import tiny_pair

BATCHES = [[[1, 5, 9, 1, 5], [3, 3, 8], [4, 11, 12, 13, 14, 15, 16]], [[2, 6, 7, 30], [9]]]  # 3 rows, then 2
K, NEW_TOKENS = 3, 20
CAPACITY = max(len(p) for batch in BATCHES for p in batch) + NEW_TOKENS + K + 2  # the run's one capacity


def _decode_all(target, draft, method: str) -> list[list[list[int]]]:
    """Each batch decoded in turn with the run's capacity; the output tokens per batch and row."""
    outputs = []
    for prompts in BATCHES:
        generator = torch.Generator().manual_seed(0)
        if method == "ssd":
            proposer = ssd_local(draft, k=K, num_rows=len(prompts), fan_out="2")
        else:
            proposer = make_proposer(method, draft, k=K, num_rows=len(prompts), generator=generator)
        batch = new_batch(prompts, max_new_tokens=NEW_TOKENS, eos_ids=frozenset(), k=K, capacity=CAPACITY)
        decode_batch(target, proposer, batch, sampling_rows(len(prompts), 0.0), generator)
        outputs.append([row.output_ids for row in batch.rows])
    return outputs


@pytest.mark.parametrize("method", ["ar", "sd", "ssd"])
def test_the_graphed_models_static_path_decodes_what_the_dynamic_one_does(method):
    target, draft = tiny_pair(vocab=48, seed=1, draft="noisy")
    want = _decode_all(target, draft, method)
    target_copy, draft_copy = tiny_pair(vocab=48, seed=1, draft="noisy")
    wrapped_target = GraphedModel(target_copy, max_tokens=K + 1)
    wrapped_draft = GraphedModel(draft_copy, max_tokens=K + 1, tree_widths=4)  # as ssd's draft process wraps it
    got = _decode_all(wrapped_target, wrapped_draft, method)
    assert got == want
    storage = wrapped_target.model.cache
    assert storage.batch_size == 2 and storage.k.data_ptr() == wrapped_target._storage.k.data_ptr()
    assert wrapped_target._storage.batch_size == 3  # the second batch ran on the first's buffers
