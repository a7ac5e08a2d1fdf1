"""`--random-weights`: a published model shape with random weights, for timing real shapes on a
machine that has no checkpoint and no internet (docs/DESIGN.md §4.5).

The weights are N(0, 0.02) with unit norms (`llama.build_random_model`), drawn per tensor from
the run's seed, so the draft process builds exactly the target's weights. Prompts are tokenised
with the embedded SmolLM2 tokenizer (its ids fit every published vocabulary). Random models
agree on almost nothing and follow no EOS: outputs are not any real model's, and every run says so.
"""

from __future__ import annotations

from dataclasses import dataclass

from ssdbench.errors import UsageError
from ssdbench.models.shape import KNOWN_SHAPES, ModelShape, known_shape

TOKENIZER_MODEL = "smollm2-135m"  # the embedded model: its tokenizer needs no download
STD = 0.02


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
