"""Sampled answers through `ssdbench serve --method sd` follow the target's distribution exactly: the
request's own temperature reaches the verifier, row by row, in batches that mix sampled and greedy rows.

Each sample is one request for 3 tokens with K = 1: the prefill's token, the draft's token and the bonus
after it, so the whole round is checked. A 4-token vocabulary keeps the continuations few (4^3).
The chi-square machinery (tests/exactness.py) is shown rejecting biased rules in test_sd_sampling.py; here
the same counts are also held against the distribution at a nearby temperature, which they must fail (a
server that used another temperature than the request's would look like that).
"""

from __future__ import annotations

from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from cli_fixtures import save_tiny_model
from exactness import ALPHA, chi_square_pvalue, exact_sequence_distribution
from serve_fixtures import post, running_server
from ssdbench.models.recipe import ModelRecipe, build_model

VOCAB = 4
PROMPT = [2, 3, 2, 0, 3]
TEMPERATURE = 0.8
NEARBY_TEMPERATURE = 0.95
SAMPLES = 2400
LENGTH = 3


HEAD_SCALE = 20.0  # a random tiny model's logits are near 0: scaled, its distributions are far from uniform,
# so a wrong temperature or a biased rule shows in the counts


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    from safetensors.torch import load_file, save_file

    path = save_tiny_model(tmp_path_factory.mktemp("serve_sampling") / "tiny4", vocab=VOCAB, seed=5)
    weights = path / "model.safetensors"
    state = load_file(weights)
    state["lm_head.weight"] = state["lm_head.weight"] * HEAD_SCALE
    save_file(state, weights, metadata={"format": "pt"})
    return path


def _ask(server, temperature: float) -> tuple[int, ...]:
    status, body = post(server, "/v1/completions", {"prompt": PROMPT, "max_tokens": LENGTH, "ignore_eos": True,
                                                    "temperature": temperature})
    assert status == 200, body
    return tuple(body["choices"][0]["token_ids"])


def test_sampled_requests_follow_the_targets_distribution(folder, tmp_path):
    with running_server(folder, "sd", tmp_path, "--k", "1", "--max-batch", "8") as server:
        with ThreadPoolExecutor(max_workers=8) as pool:  # 8 clients at once: batches of several rows
            temperatures = [0.0 if i % 5 == 4 else TEMPERATURE for i in range(SAMPLES)]  # greedy rows among them
            answers = list(pool.map(lambda t: (t, _ask(server, t)), temperatures))
    sampled = Counter(ids for t, ids in answers if t > 0)
    greedy = {ids for t, ids in answers if t == 0}
    torch.manual_seed(0)
    target = build_model(ModelRecipe(model_path=str(folder)))
    exact = exact_sequence_distribution(target, PROMPT, LENGTH, temperature=TEMPERATURE)
    assert chi_square_pvalue(sampled, exact) > ALPHA
    nearby = exact_sequence_distribution(target, PROMPT, LENGTH, temperature=NEARBY_TEMPERATURE)
    assert chi_square_pvalue(sampled, nearby) < ALPHA  # the counts can tell temperatures 0.15 apart
    most_likely = exact_sequence_distribution(target, PROMPT, LENGTH, temperature=0.0)
    assert greedy == {max(most_likely, key=most_likely.get)}  # every greedy row, whatever its batch, is argmax
