"""One recipe for a native model, and one way to build it.

A ModelRecipe says everything a native model is built from: where its weights come from (a checkpoint
folder, or a published shape with random weights drawn from a seed), its dtype, int8 or not, the kernels
and the device. It is picklable, so the in-process model set, ssd's draft process and every
tensor-parallel rank build from the same recipe and cannot drift apart.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class ModelRecipe:
    model_path: str | None = None  # a checkpoint folder; None with random_shape
    random_shape: str | None = None  # --random-weights: this published shape ...
    random_seed: int = 0  # ... with weights drawn from this seed
    trust_remote_code: bool = False
    dtype: str = "float32"
    int8: bool = False  # weight-only int8 projections (the self-int8 draft)
    attention: str = "sdpa"
    linear_kernel: str = "auto"
    int8_kernel: str = "auto"
    skip_layers: tuple[int, ...] = ()  # the self-skip draft: the layers left out
    device: str = "cpu"

    @property
    def weights(self) -> str:
        return "int8" if self.int8 else "fp32"


def build_model(recipe: ModelRecipe, *, flag: str = "--target", config=None, state: dict | None = None):
    """The NativeCausalLM the recipe describes. `config` and `state` (the checkpoint's, already read) spare
    reading them again where the caller holds them; `flag` names the option in a refusal."""
    from ssdbench.kernels.probe import default_cache_path
    from ssdbench.models.dtypes import torch_dtype
    from ssdbench.models.build import build_native_model, build_random_model

    common = {"device": recipe.device, "dtype": torch_dtype(recipe.dtype), "backend": recipe.attention,
              "weights": recipe.weights, "linear_kernel": recipe.linear_kernel, "int8_kernel": recipe.int8_kernel}
    if recipe.skip_layers:
        common["skip_layers"] = recipe.skip_layers
    if recipe.random_shape is not None:
        source = random_source_of(recipe, flag=flag)
        return build_random_model(source.shape, seed=source.seed, **common)
    if config is None or state is None:
        source = checkpoint_of(recipe)
        config = load_config_of(source) if config is None else config
        state = load_state_of(source) if state is None else state
    return build_native_model(config, state, kernel_cache=default_cache_path(), **common)


def full_shape_and_lookup(recipe: ModelRecipe, *, device, flag: str = "--target"):
    """(ModelShape, name -> full tensor) for building a part of the model (a tensor-parallel rank's shard)."""
    from ssdbench.models.checkpoint.weights import lazy_state_lookup
    from ssdbench.models.build import random_weights_lookup
    from ssdbench.models.shape import ModelShape

    if recipe.random_shape is not None:
        source = random_source_of(recipe, flag=flag)
        return source.shape, random_weights_lookup(source.shape, seed=source.seed, device=device)
    source = checkpoint_of(recipe)
    return ModelShape.from_hf_config(load_config_of(source)), lazy_state_lookup(source, dtype=torch.float32)


def random_source_of(recipe: ModelRecipe, *, flag: str):
    from ssdbench.models.checkpoint.random_weights import random_source

    return random_source(recipe.random_shape, seed=recipe.random_seed, flag=flag)


def checkpoint_of(recipe: ModelRecipe):
    from ssdbench.models.checkpoint.source import resolve_model

    return resolve_model(recipe.model_path, trust_remote_code=recipe.trust_remote_code)


def load_config_of(source):
    from ssdbench.models.checkpoint.weights import load_config

    return load_config(source)


def load_state_of(source) -> dict:
    from ssdbench.models.checkpoint.weights import load_state_dict

    return load_state_dict(source, dtype=torch.float32)
