"""Greedy `ssd` is token-identical to `ar`: batch sizes, K, fan-outs, backups, hits and misses."""

from __future__ import annotations

import pytest

from decode_helpers import decode, ssd_local
from tiny_models import tiny_pair

PROMPTS = [[1, 5, 9, 1, 5], [3, 3, 8], [4, 11, 12, 13, 14, 15, 16], [2, 6]]
EOS = {44}


@pytest.fixture(scope="module")
def pair():
    return tiny_pair(vocab=48, seed=1, draft="noisy")


@pytest.fixture(scope="module")
def ar_outputs(pair):
    target, _ = pair
    return {b: [r.output_ids for r in decode(target, None, PROMPTS[:b], max_new_tokens=24, k=0, eos_ids=EOS)[0].rows]
            for b in (1, 2, 4)}


@pytest.mark.parametrize("batch_size", [1, 2, 4])
@pytest.mark.parametrize("k,fan_out,fan_out_list", [(1, "1", None), (3, "2", None), (3, None, "4,2,1,1"), (4, "auto", None)])
@pytest.mark.parametrize("backup", ["jit", "fast", "auto"])
def test_ssd_greedy_matches_ar(pair, ar_outputs, batch_size, k, fan_out, fan_out_list, backup):
    target, draft = pair
    proposer = ssd_local(draft, k=k, num_rows=batch_size, fan_out=fan_out or "1", fan_out_list=fan_out_list, backup=backup)
    ssd, steps = decode(target, proposer, PROMPTS[:batch_size], max_new_tokens=24, k=k, eos_ids=EOS)
    assert [r.output_ids for r in ssd.rows] == ar_outputs[batch_size]
    hits = [s for s in steps if s.extras["cache_hit"]]
    misses = [s for s in steps if s.extras["cache_hit"] is False]
    assert hits and misses, "both hit and miss rounds must be exercised"
    assert all(s.extras["backup"] is None for s in hits) and all(s.extras["backup"] in ("jit", "fast") for s in misses)
    if backup != "auto":
        assert {s.extras["backup"] for s in misses} == {backup}
