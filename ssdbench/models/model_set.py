"""The models of one run, loaded once and shared by every method and engine.

Native models are built from the same state dict as transformers' ones, so `--engine
native,hf` compares the two codes on the same weights.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import torch

from ssdbench.errors import UsageError
from ssdbench.kernels.probe import default_cache_path
from ssdbench.models.cuda_graphs import GraphedModel, checked_mode, unwrapped, uses_cuda_graphs
from ssdbench.models.drafts import DraftChoice, NGRAM, SELF_INT8, SELF_SKIP, parse_draft
from ssdbench.models.dtypes import torch_dtype
from ssdbench.models.recipe import ModelRecipe, build_model
from ssdbench.models.hf_engine import HfCausalLM, int8_weight_only_copy, load_hf_model
from ssdbench.models.int8.select import select_int8_kernel
from ssdbench.models.build import int8_kernels_without_room, projection_shapes
from ssdbench.models.checkpoint.random_weights import random_source, random_weights_tokenizer
from ssdbench.models.shape import ModelShape
from ssdbench.models.self_skip import choose_skipped_layers, skipping_view
from ssdbench.models.checkpoint.source import resolve_model
from ssdbench.models.checkpoint.weights import (
    check_same_vocabulary,
    check_weights_match_config,
    load_config,
    load_state_dict,
    load_tokenizer,
    weight_file_hashes,
)

__all__ = ["NGRAM", "SELF_INT8", "ModelSet", "ModelSettings", "torch_dtype"]


@dataclass(frozen=True)
class ModelSettings:
    """What the model set needs to know of a run (made by the run plan)."""

    target: str
    draft: DraftChoice = parse_draft(SELF_INT8)
    dtype: str = "float32"
    attention: str = "sdpa"
    linear_kernel: str = "auto"
    int8_kernel: str = "auto"  # the int8 draft's kernel: auto probes, a name pins (models/int8/select.py)
    device: str = "cpu"  # where the target (and sd's in-process draft) runs
    engines: tuple[str, ...] = ("native",)
    allow_download: bool = False
    trust_remote_code: bool = False
    random_weights: bool = False  # published shapes, random weights (random_weights.py)
    seed: int = 0  # of the random weights
    tp: int = 1  # tensor-parallel ranks of the native target (tensor_parallel.py)
    threads: int | None = None  # torch threads of the run (split between CPU ranks)
    cuda_graphs: str = "auto"  # native models on CUDA replay graphed steps (cuda_graphs.py)
    k: int = 4  # draft tokens per round: graphed steps are up to a K+1-token verify
    draft_device: str | None = None  # sd's in-process draft (--sd-draft-device); None: the target's device


@dataclass
class ModelSet:
    """Resolves the target and draft once; builds each engine's models when first asked."""

    config: ModelSettings
    _cache: dict = field(default_factory=dict)
    skip_choice: object | None = None  # self-skip:auto's calibration (self_skip.SkipChoice), once made

    @property
    def skip_layers(self) -> tuple[int, ...]:
        """The self-skip draft's layers: given in --draft, or chosen by `calibrate_self_skip`."""
        if self.config.draft.skip_layers is not None:
            return self.config.draft.skip_layers
        if self.skip_choice is None:
            raise UsageError("self-skip:auto has not been calibrated yet (ModelSet.calibrate_self_skip)")
        return tuple(self.skip_choice.layers)

    def calibrate_self_skip(self, prompts: list[list[int]], *, k: int):
        """Choose self-skip:auto's layers on `prompts` with the native target (once per model set)."""
        if self.skip_choice is None:
            self.skip_choice = choose_skipped_layers(unwrapped(self.target("native")), prompts, k=k)
        return self.skip_choice

    @cached_property
    def target_source(self):
        if self.config.random_weights:
            return random_source(self.config.target, seed=self.config.seed, flag="--target")
        return resolve_model(self.config.target, allow_download=self.config.allow_download,
                             trust_remote_code=self.config.trust_remote_code)

    @cached_property
    def draft_source(self):
        if self.config.draft.model_spec is None:
            return None
        if self.config.random_weights:
            return random_source(self.config.draft.model_spec, seed=self.config.seed + 1, flag="--draft")
        return resolve_model(self.config.draft.model_spec, allow_download=self.config.allow_download,
                             trust_remote_code=self.config.trust_remote_code)

    @cached_property
    def tokenizer(self):
        if self.config.random_weights:
            return random_weights_tokenizer()
        return load_tokenizer(self.target_source)

    @cached_property
    def target_hf_config(self):
        return load_config(self.target_source)

    @cached_property
    def target_shape(self) -> ModelShape:
        if self.config.random_weights:
            return self.target_source.shape
        return ModelShape.from_hf_config(self.target_hf_config)

    @cached_property
    def draft_shape(self) -> ModelShape | None:
        """The draft model's shape: the target's for drafts made from it, None without a model."""
        if not self.config.draft.has_model:
            return None
        if self.config.draft.from_target:
            return self.target_shape
        if self.config.random_weights:
            return self.draft_source.shape
        return ModelShape.from_hf_config(load_config(self.draft_source))

    @property
    def context_limits(self) -> list[int]:
        """max_position_embeddings of every model the run builds (those that declare one)."""
        if self.config.random_weights:
            return [s.max_position for s in (self.target_shape, self.draft_shape) if s is not None]
        configs = [self.target_hf_config] + ([load_config(self.draft_source)] if self.draft_source else [])
        return [int(p) for c in configs if (p := getattr(c, "max_position_embeddings", None))]

    @property
    def num_layers(self) -> int:
        return self.target_shape.num_layers if self.config.random_weights else \
            int(self.target_hf_config.num_hidden_layers)

    @property
    def eos_ids(self) -> frozenset[int]:
        """The target's end-of-sequence ids (none for random weights: they decode to the token limit)."""
        if self.config.random_weights:
            return frozenset()
        eos = self.target_hf_config.eos_token_id
        if eos is None:
            eos = self.tokenizer.eos_token_id
        return frozenset(eos if isinstance(eos, (list, tuple)) else [eos] if eos is not None else [])

    @property
    def vocab_size(self) -> int:
        if self.config.random_weights:
            return self.target_shape.vocab
        return int(self.target_hf_config.vocab_size)

    def weight_hashes(self) -> dict:
        """SHA-256 of each model's weight files, for the manifest (random weights: how they were drawn)."""
        roles = {"target": self.target_source, "draft": self.draft_source}
        return {role: source.origin if self.config.random_weights else weight_file_hashes(source)
                for role, source in roles.items() if source is not None}

    def check_vocabularies(self) -> None:
        """Target and draft must share a vocabulary; checked before any work starts."""
        if self.config.random_weights:
            self._check_random_vocabularies()
            return
        if self.draft_source is None:
            return
        check_same_vocabulary(
            (self.target_hf_config, self.tokenizer), (load_config(self.draft_source), load_tokenizer(self.draft_source))
        )

    def _check_random_vocabularies(self) -> None:
        """The embedded tokenizer's ids must fit the shapes, and target and draft shapes share a vocabulary."""
        tokens = len(self.tokenizer)
        for role, shape in (("target", self.target_shape), ("draft", self.draft_shape)):
            if shape is not None and shape.vocab < tokens:
                raise UsageError(f"--random-weights: the {role} shape's vocabulary ({shape.vocab}) is smaller than "
                                 f"the prompts' tokenizer's ({tokens})")
        if self.draft_shape is not None and self.draft_shape.vocab != self.target_shape.vocab:
            raise UsageError(f"--random-weights: target and draft shapes have different vocabularies "
                             f"({self.target_shape.vocab} vs {self.draft_shape.vocab})")

    def check_weights(self) -> None:
        """Tensor names and shapes (from the headers) match each config, before the native engine loads them."""
        if "native" not in self.config.engines or self.config.random_weights:
            return
        check_weights_match_config(self.target_source, self.target_hf_config)
        if self.draft_source is not None:
            check_weights_match_config(self.draft_source, load_config(self.draft_source))

    def target(self, engine: str):
        return self._get(("target", engine), lambda: self._build(self.target_source, engine, int8=False))

    def draft(self, engine: str):
        if not self.config.draft.has_model:
            raise UsageError(f"the {self.config.draft.kind} draft has no model")
        device = self.draft_device
        if self.config.draft.int8:
            return self._get(("draft", engine), lambda: self._build(self.target_source, engine, int8=True, device=device))
        if self.config.draft.kind == SELF_SKIP:
            return self._get(("draft", engine), lambda: self._skipping_draft(engine))
        return self._get(("draft", engine), lambda: self._build(self.draft_source, engine, int8=False, device=device))

    def _skipping_draft(self, engine: str):
        """The target's own layers minus the skipped ones (shared weights, a KV cache of its own)."""
        if engine != "native":
            raise UsageError("the self-skip draft runs on the native engine only")
        target = self.target("native")
        return self._graphed(skipping_view(unwrapped(target), self.skip_layers), self.device)  # graphed afresh

    def hf_target(self):
        """transformers' own model (for `--engine hf` and the generate baselines)."""
        return self._get(("hf-model", "target"), lambda: self._load_hf(self.target_source))

    def hf_draft(self):
        if self.config.draft.int8:
            return self._get(("hf-model", "draft"), lambda: int8_weight_only_copy(self.hf_target(), self.int8_kernels()))
        return self._get(("hf-model", "draft"), lambda: self._load_hf(self.draft_source))

    def int8_kernels(self):
        """The self-int8 draft's kernel choice: the one the native draft's build makes (the same
        arguments to the same remembered probe), so transformers' copy runs the same kernels."""
        return select_int8_kernel(self.device, torch_dtype(self.config.dtype),
                                  shapes=tuple(projection_shapes(self.target_shape)),
                                  disabled=int8_kernels_without_room(self.target_shape),
                                  cache_path=default_cache_path(), kernel=self.config.int8_kernel)

    @property
    def device(self) -> str:
        """The target's device (the run plan's target placement)."""
        return self.config.device

    @property
    def draft_device(self) -> str:
        """Where the in-process draft runs: --sd-draft-device, else the target's device."""
        return self.config.draft_device or self.config.device

    def _get(self, key, build):
        if key not in self._cache:
            self._cache[key] = build()
        return self._cache[key]

    def _load_hf(self, source):
        return load_hf_model(source.path, dtype=torch_dtype(self.config.dtype), device=self.device,
                             trust_remote_code=source.trust_remote_code)

    def _build(self, source, engine: str, *, int8: bool, device: str | None = None):
        device = device or self.device
        model = self._build_model(source, engine, int8=int8, device=device)
        return self._graphed(model, device) if engine == "native" else model

    def _graphed(self, model, device: str):
        """A native model, wrapped to replay CUDA graphs where the run uses them (not with --tp)."""
        if self.config.tp == 1 and uses_cuda_graphs(checked_mode(self.config.cuda_graphs), device):
            return GraphedModel(model, max_tokens=self.config.k + 1)
        return model

    def _build_model(self, source, engine: str, *, int8: bool, device: str):
        if engine == "hf":
            model = self.hf_draft() if int8 else self.hf_target() if source is self.target_source else self._load_hf(source)
            return HfCausalLM(model)
        if self.config.tp > 1 and source is self.target_source and not int8:
            return self._tensor_parallel_target()
        recipe = self.recipe(source, int8=int8, device=device)
        if recipe.random_shape is not None:
            return build_model(recipe)
        state = self._get(("state", source.path), lambda: load_state_dict(source, dtype=torch.float32))
        return build_model(recipe, config=load_config(source), state=state)  # one state dict for target and draft

    def recipe(self, source, *, int8: bool, device: str) -> ModelRecipe:
        """How `source`'s native model is built here; ssd's draft process and tensor-parallel ranks get theirs
        the same way."""
        config, random = self.config, self.config.random_weights
        return ModelRecipe(model_path=None if random else str(source.path), random_shape=source.name if random else None,
                           random_seed=source.seed if random else 0, trust_remote_code=config.trust_remote_code,
                           dtype=config.dtype, int8=int8, attention=config.attention,
                           linear_kernel=config.linear_kernel, int8_kernel=config.int8_kernel, device=device)

    def _tensor_parallel_target(self):
        """The target split over `tp` ranks, rank 0 here; the others started now (tensor_parallel.py)."""
        from ssdbench.models.tensor_parallel import ShardRecipe, cpu_threads_per_rank, launch

        self.target_shape.tensor_parallel_shard(self.config.tp)  # a one-line refusal unless tp divides it
        cpu = torch.device(self.device).type == "cpu"
        recipe = ShardRecipe(self.recipe(self.target_source, int8=False, device=self.device),
                             threads=cpu_threads_per_rank(self.config.threads, self.config.tp) if cpu else None)
        return launch(recipe, self.config.tp)

    def close(self) -> None:
        """Stop what the models hold outside this process (a tensor-parallel target's ranks)."""
        for model in self._cache.values():
            if hasattr(model, "close"):
                model.close()

    def kernels_used(self) -> dict:
        """Per built native model ("target", "draft"): the kernels it actually runs."""
        return {role: model.kernel_names() for role, model in self._native_models()}

    def kernel_probes(self) -> dict:
        """Per built native model: the probe's trials behind its dense kernel (absent for int8 weights)."""
        return {role: model.kernels["linear_probe"] for role, model in self._native_models()
                if "linear_probe" in model.kernels}

    def _native_models(self) -> list:
        return [(role, model) for (role, engine), model in self._cache.items()
                if engine == "native" and hasattr(model, "kernel_names")]
