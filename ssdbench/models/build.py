"""Building a native model (llama.py): from a transformers config and a state dict, at a published shape with
random weights, or from any name -> tensor lookup (a tensor-parallel rank's slices); which kernels its
projections get (the dense and int8 probes), and which layers a self-skip draft keeps.
"""

from __future__ import annotations

import zlib
from dataclasses import replace
from pathlib import Path
from typing import Callable

import torch

from ssdbench.errors import UsageError
from ssdbench.kernels.linear import make_dense, select_dense_kernel
from ssdbench.kernels.registry import get_backend
from ssdbench.models.int8.select import SECOND_LAYOUT, make_int8_linear, select_int8_kernel
from ssdbench.models.llama import WEIGHT_FORMATS, DecoderLayer, NativeCausalLM
from ssdbench.models.shape import ModelShape, hf_param_shapes


def build_native_model(config, state_dict: dict[str, torch.Tensor], *, device="cpu", dtype=torch.float32,
                       backend: str = "sdpa", weights: str = "fp32", linear_kernel: str = "auto",
                       disabled_kernels: frozenset[str] = frozenset(), kernel_cache: Path | None = None,
                       skip_layers: tuple[int, ...] = (), int8_kernel: str = "auto") -> NativeCausalLM:
    """A native model from a transformers config and a state dict in Hugging Face naming.

    weights "fp32": dense projections stored in `dtype`; "int8": weight-only int8 (int8/),
    the rest (embedding, norms, KV cache, attention) in `dtype`. Logits are fp32 either way.
    linear_kernel "auto" probes the dense kernels (kernels/probe.py), skipping `disabled_kernels`
    (also int8 ones), and reuses an earlier choice of this machine from `kernel_cache`; int8_kernel
    "auto" probes the int8 kernels alike, a name (models/int8/select.py) pins one.
    skip_layers: decoder layers (checkpoint indices) to leave out, the self-skip draft: the
    residual stream passes them unchanged; their weights are not read and get no KV cache.
    """
    shape = ModelShape.from_hf_config(config)
    return build_from_lookup(shape, state_dict.get, device=device, dtype=dtype, backend=backend, weights=weights,
                  linear_kernel=linear_kernel, disabled=disabled_kernels, cache=kernel_cache, skip=skip_layers,
                  int8_kernel=int8_kernel)


def build_random_model(shape: ModelShape, *, seed: int = 0, device="cpu", dtype=torch.float32,
                       backend: str = "sdpa", weights: str = "fp32", linear_kernel: str = "auto",
                       std: float = 0.02, disabled_kernels: frozenset[str] = frozenset(),
                       skip_layers: tuple[int, ...] = (), int8_kernel: str = "auto") -> NativeCausalLM:
    """A model of `shape` with N(0, std) weights and unit norms, for timing without a checkpoint."""
    return build_from_lookup(shape, random_weights_lookup(shape, seed=seed, device=device, std=std), device=device,
                             dtype=dtype, backend=backend, weights=weights, linear_kernel=linear_kernel,
                             disabled=disabled_kernels, cache=None, skip=skip_layers, int8_kernel=int8_kernel)


def random_weights_lookup(shape: ModelShape, *, seed: int, device="cpu", std: float = 0.02):
    """name -> the random tensor of that name (Hugging Face shape), or None for a name the shape lacks.

    Each tensor is drawn from a generator seeded by (seed, its name), not from one stream, so
    a model with `skip_layers`, or a tensor-parallel shard, has exactly the full model's weights.
    """
    expected = hf_param_shapes(shape)

    def random_tensor(name: str) -> torch.Tensor | None:
        if name not in expected:
            return None
        if name.endswith("norm.weight"):
            return torch.ones(expected[name], device=device)  # [n]
        generator = torch.Generator(device=device).manual_seed(_tensor_seed(seed, name))
        return torch.randn(expected[name], generator=generator, device=device).mul_(std)  # HF shape

    return random_tensor


def _tensor_seed(seed: int, name: str) -> int:
    """A seed per (model seed, tensor name), stable across runs and Python versions (crc32, not hash())."""
    return (seed % (1 << 31)) << 32 | zlib.crc32(name.encode())


def check_skip_layers(num_layers: int, skip_layers) -> tuple[int, ...]:
    """The layers to skip, sorted; a one-line UsageError unless each is a distinct index in
    [0, num_layers) and at least one layer is kept."""
    skip = tuple(skip_layers)
    bad = [i for i in skip if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < num_layers]
    if bad:
        raise UsageError(f"cannot skip layer {bad[0]!r}: the model has {num_layers} layers, 0..{num_layers - 1}")
    repeated = sorted({i for i in skip if skip.count(i) > 1})
    if repeated:
        raise UsageError(f"layer {repeated[0]} is named twice in the layers to skip")
    if len(skip) >= num_layers:
        raise UsageError(f"cannot skip all {num_layers} layers of the model: at least one must be kept")
    return tuple(sorted(skip))


def kept_layers(num_layers: int, skip_layers: tuple[int, ...]) -> list[int]:
    """Checkpoint indices of the layers a model without `skip_layers` runs, in order."""
    skipped = set(skip_layers)
    return [i for i in range(num_layers) if i not in skipped]


def build_from_lookup(shape: ModelShape, lookup: Callable[[str], torch.Tensor | None], *, device, dtype,
                      backend: str, weights: str, linear_kernel: str, disabled: frozenset[str] = frozenset(),
                      cache: Path | None = None, skip: tuple[int, ...] = (), int8_kernel: str = "auto") -> NativeCausalLM:
    """A native model of `shape` whose tensors `lookup(name)` gives in Hugging Face naming and shape
    (None: absent; a bias absent is zero). The builders above and tensor_parallel.py's shards use it."""
    if weights not in WEIGHT_FORMATS:
        raise UsageError(f"unknown weight format {weights!r}: known: {', '.join(WEIGHT_FORMATS)}")
    skip = check_skip_layers(shape.num_layers, skip)
    attention = get_backend(backend, device=device)
    attention.check(device=torch.device(device), dtype=dtype)
    fetch = _fetcher(shape, lookup)
    kernels, make_linear = _linear_maker(shape, device=device, dtype=dtype, weights=weights,
                                         linear_kernel=linear_kernel, disabled=disabled, cache=cache,
                                         int8_kernel=int8_kernel)

    def linear(prefix: str, names: tuple[str, ...]):
        ws = [fetch(f"{prefix}{n}.weight") for n in names]  # [out_n, in] each
        bs = [lookup(f"{prefix}{n}.bias") for n in names]  # [out_n] or None each
        if all(b is None for b in bs):
            return make_linear(torch.cat(ws), None)
        bs = [w.new_zeros(w.shape[0]) if b is None else b for w, b in zip(ws, bs)]  # absent = zero
        return make_linear(torch.cat(ws), torch.cat(bs))  # [out_total, in], [out_total]

    def vector(name: str) -> torch.Tensor:
        return fetch(name).to(device=device, dtype=dtype)

    layers = []
    for i in kept_layers(shape.num_layers, skip):  # a skipped layer's weights are never read
        p = f"model.layers.{i}."
        layers.append(DecoderLayer(
            attn_norm=vector(p + "input_layernorm.weight"),
            qkv=linear(p + "self_attn.", ("q_proj", "k_proj", "v_proj")),
            o=linear(p + "self_attn.", ("o_proj",)),
            mlp_norm=vector(p + "post_attention_layernorm.weight"),
            gate_up=linear(p + "mlp.", ("gate_proj", "up_proj")),
            down=linear(p + "mlp.", ("down_proj",)),
            q_norm=vector(p + "self_attn.q_norm.weight") if shape.has_qk_norm else None,
            k_norm=vector(p + "self_attn.k_norm.weight") if shape.has_qk_norm else None,
        ))
    embed = fetch("model.embed_tokens.weight")  # [V, hidden]
    lm_head = make_linear(embed if shape.tie_word_embeddings else fetch("lm_head.weight"), None)
    embed = embed.to(device=device, dtype=dtype)
    kernels["attention"] = attention.name
    runs = replace(shape, num_layers=len(layers))  # the KV cache and byte counts cover the kept layers
    return NativeCausalLM(runs, layers, embed=embed, norm=vector("model.norm.weight"), lm_head=lm_head,
                          backend=attention, device=device, dtype=dtype, weights=weights, kernels=kernels,
                          skipped_layers=skip)


def _linear_maker(shape: ModelShape, *, device, dtype, weights: str, linear_kernel: str, disabled: frozenset[str],
                  cache: Path | None, int8_kernel: str = "auto") -> tuple[dict, Callable]:
    """(what the manifest records of the kernels, the function making each projection)."""
    if weights == "int8":
        int8 = select_int8_kernel(device, dtype, shapes=tuple(projection_shapes(shape)),
                                  disabled=disabled | int8_kernels_without_room(shape), cache_path=cache,
                                  kernel=int8_kernel)
        return ({"linear": int8.name, "linear_probe": int8.describe()},
                lambda w, b: make_int8_linear(w, b, device=device, choice=int8))
    choice = select_dense_kernel(linear_kernel, device, dtype, shapes=projection_shapes(shape),
                                 allow_split=_room_for_two_layouts(shape, dtype), disabled=disabled, cache_path=cache,
                                 fuses=_fuses(device, dtype))
    return ({"linear": choice.name, "linear_probe": choice.describe()},
            lambda w, b: make_dense(choice, w, b, device=device, dtype=dtype))


def _fuses(device, dtype: torch.dtype) -> bool:
    """Whether a dense model's steps can run decode_layer.c's fused step (FusedDecode.make's device and dtype)."""
    return torch.device(device).type == "cpu" and dtype == torch.float32


def projection_shapes(shape: ModelShape) -> list[tuple[int, int]]:
    """(in, out) of one layer's fused projections and the lm_head: the shapes a probe times."""
    qkv_out = (shape.num_heads + 2 * shape.num_kv_heads) * shape.head_dim
    return [(shape.hidden, qkv_out), (shape.num_heads * shape.head_dim, shape.hidden),
            (shape.hidden, 2 * shape.intermediate), (shape.intermediate, shape.hidden), (shape.hidden, shape.vocab)]


def int8_kernels_without_room(shape: ModelShape) -> frozenset[str]:
    """The int8 kernels that keep a second layout of the weights (at most bf16-sized), where there is no room for one."""
    return frozenset() if _room_for_two_layouts(shape, torch.bfloat16) else frozenset(SECOND_LAYOUT)


def _room_for_two_layouts(shape: ModelShape, dtype: torch.dtype) -> bool:
    """Two layouts of the dense weights only where a second copy takes under a quarter of free memory."""
    try:
        with open("/proc/meminfo", encoding="utf-8") as f:
            free_kib = next(int(line.split()[1]) for line in f if line.startswith("MemAvailable:"))
    except (OSError, StopIteration, ValueError):
        return False
    return shape.num_params() * dtype.itemsize < free_kib * 1024 / 4


def _fetcher(shape: ModelShape, lookup: Callable[[str], torch.Tensor | None]) -> Callable[[str], torch.Tensor]:
    """lookup(name), checked against the shape's parameter table; missing or misshapen is a UsageError."""
    expected = hf_param_shapes(shape)

    def fetch(name: str) -> torch.Tensor:
        tensor = lookup(name)
        if tensor is None:
            raise UsageError(f"model weights lack {name!r}")
        if name in expected and tuple(tensor.shape) != expected[name]:
            raise UsageError(f"weight {name!r} has shape {tuple(tensor.shape)}, the config says {expected[name]}")
        return tensor

    return fetch
