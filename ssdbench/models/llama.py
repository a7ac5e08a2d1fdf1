"""The native Llama-family decoder: Llama 3.x, SmolLM2, Qwen2/2.5 (qkv bias), Qwen3 (qk norm).

Laid out for memory-bound decoding: q/k/v fused into one projection and gate/up into
another, a separate lm_head even when tied, RoPE tables gathered by logical position.
Projections are dense kernels from ssdbench.kernels.linear (oneDNN-packed weights on CPU,
transposed `x @ w_t` elsewhere) or weight-only int8 (int8/).
The KV cache is static and slot-indexed (kv_cache.py); attention goes through a
pluggable backend (ssdbench.kernels) with an explicit boolean mask, so the same forward
runs a causal chain, a batch of rows of different lengths, or SSD's draft tree.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F

from ssdbench.errors import UsageError
from ssdbench.kernels.base import AttentionBackend
from ssdbench.kernels.decode_layer import NO_LIMIT, FusedDecode
from ssdbench.kernels.gemv import openmp_fallback
from ssdbench.kernels.linear import make_dense, select_dense_kernel
from ssdbench.kernels.registry import get_backend
from ssdbench.models.int8.select import SECOND_LAYOUT, make_int8_linear, select_int8_kernel
from ssdbench.models.kv_cache import StaticKVCache
from ssdbench.models.shape import ModelShape, hf_param_shapes

WEIGHT_FORMATS = ("fp32", "int8")


@dataclass
class DecoderLayer:
    attn_norm: torch.Tensor  # [hidden]
    qkv: Callable[[torch.Tensor], torch.Tensor]  # [..., hidden] -> [..., (H + 2 Hkv) D]
    o: Callable[[torch.Tensor], torch.Tensor]  # [..., H D] -> [..., hidden]
    mlp_norm: torch.Tensor  # [hidden]
    gate_up: Callable[[torch.Tensor], torch.Tensor]  # [..., hidden] -> [..., 2 I]
    down: Callable[[torch.Tensor], torch.Tensor]  # [..., I] -> [..., hidden]
    q_norm: torch.Tensor | None = None  # [D], Qwen3
    k_norm: torch.Tensor | None = None  # [D], Qwen3


def _rope_tables(shape: ModelShape, length: int, *, device, dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sign-folded sin [length, 1, D]: rope(x) = x * cos + x.roll(D/2) * sin."""
    positions = torch.arange(length, dtype=torch.int64).float()  # [S]
    freqs = positions[:, None] * shape.inv_freq()[None, :]  # [S, D/2]
    cos = torch.cat((freqs, freqs), dim=-1).cos()  # [S, D]
    sin_half = freqs.sin()  # [S, D/2]
    sin = torch.cat((-sin_half, sin_half), dim=-1)  # [S, D]: roll(x)*sin == rotate_half(x)*sin_hf
    return cos[:, None].to(device, dtype), sin[:, None].to(device, dtype)


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:  # [B, T, n, D]
    return x * cos + x.roll(x.shape[-1] // 2, dims=-1) * sin


class NativeCausalLM:
    """A decoder with its own static KV cache: `allocate`, then `forward` any [B, T] step.

    `shape` is what runs: with `skipped_layers` (the checkpoint's layer indices left out, for
    the self-skip draft) its num_layers counts only the kept layers, which is what the
    KV cache and `weight_bytes_per_forward` cover.
    """

    def __init__(self, shape: ModelShape, layers: list[DecoderLayer], *, embed, norm, lm_head,
                 backend: AttentionBackend, device, dtype, weights: str, kernels: dict | None = None,
                 skipped_layers: tuple[int, ...] = ()) -> None:
        if len(layers) != shape.num_layers:
            raise ValueError(f"{len(layers)} layers for a shape of {shape.num_layers}")
        self.shape, self.layers, self.backend = shape, layers, backend
        self.skipped_layers = tuple(skipped_layers)
        self.embed, self.norm, self.lm_head = embed, norm, lm_head  # [V, hidden], [hidden], linear
        self.device, self.dtype, self.weights = torch.device(device), dtype, weights
        self.vocab_size = shape.vocab
        self.backend_name = backend.name
        self.kernels = kernels or {}  # what the projections actually run on (see `_kernels_used`)
        self.scale = shape.head_dim**-0.5
        self.cache: StaticKVCache | None = None
        self.static_shapes = False  # attend over the whole cache with an on-device mask (cuda_graphs.py)
        self.fused_decode = True  # steps through kernels/decode_layer.c where it applies
        self._fused: FusedDecode | None | bool = False  # False: not looked at yet
        self._cos = self._sin = torch.empty(0, 1, shape.head_dim, device=device, dtype=dtype)  # [S, 1, D]

    def allocate(self, batch_size: int, max_len: int) -> None:
        """(Re)allocate the static cache for `batch_size` rows of `max_len` slots (contents zeroed).

        Logical positions must stay below `max_len` too: the RoPE tables cover [0, max_len).
        """
        s = self.shape
        self.cache = StaticKVCache(num_layers=s.num_layers, batch_size=batch_size, num_kv_heads=s.num_kv_heads,
                                   max_len=max_len, head_dim=s.head_dim, device=self.device, dtype=self.dtype)
        if self._cos.shape[0] < max_len:
            self._cos, self._sin = _rope_tables(s, max_len, device=self.device, dtype=self.dtype)

    @torch.inference_mode()
    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, *, slots: torch.Tensor | None = None,
                attn_mask: torch.Tensor | None = None, logits_at: torch.Tensor | None = None,
                return_hidden: bool = False):
        """One step over tokens [B, T]; returns fp32 logits [B, T, V] (or [B, T', V] at `logits_at`),
        or (logits, hidden [B, T, H]) with `return_hidden`: the final-norm'd states the lm_head reads.

        positions [B, T]: logical positions (RoPE). slots [B, T]: cache slots this step's K/V
        go to (default: positions). attn_mask [B, T, S_max] bool: which slots each query sees
        (default: the causal chain, slot j visible to (b, t) iff j <= slots[b, t]); its own
        slot must be visible to every query. logits_at [B, T'] long: columns of T to return.
        """
        cache = self._checked_cache(tokens, attn_mask)
        slots = positions if slots is None else slots
        span, mask = self._visible(slots, attn_mask)  # mask [B, 1, T, span]
        cos, sin = self._cos[positions], self._sin[positions]  # [B, T, 1, D]
        index = cache.slot_index(slots)  # [B, Hkv, T, D]
        x = F.embedding(tokens, self.embed)  # [B, T, hidden]
        if not self.static_shapes and self.fused is not None and self.fused.covers(tokens.numel()):
            chosen = None if attn_mask is None else mask[:, 0]  # [B, T, span]; None: the causal chain by slot
            x = self.fused.run(x, cos, sin, slots, chosen)
        else:
            for i, layer in enumerate(self.layers):
                x = self._attention(i, layer, x, cos, sin, index, mask, span)
                x = self._mlp(layer, x)
        if logits_at is not None:
            x = x.gather(1, logits_at[..., None].expand(-1, -1, x.shape[-1]))  # [B, T', hidden]
        x = F.rms_norm(x, (x.shape[-1],), self.norm, self.shape.rms_norm_eps)
        logits = self.lm_head(x).float()  # [B, T, V]
        return (logits, x) if return_hidden else logits

    __call__ = forward

    @property
    def fused(self) -> FusedDecode | None:
        """The fused step (kernels/decode_layer.py), or None where it does not apply or is off."""
        if not self.fused_decode:
            return None
        if self._fused is False:
            self._fused = FusedDecode.make(self)
        return self._fused

    def copy_slots(self, row: int, src: torch.Tensor, dst: torch.Tensor) -> None:
        """Row `row`'s K/V at slots src [N] copied to slots dst [N], every layer (ssd: a hit branch onto the main line)."""
        self.cache.copy_slots(row, src, dst)

    def _checked_cache(self, tokens: torch.Tensor, attn_mask: torch.Tensor | None) -> StaticKVCache:
        if self.cache is None:
            raise UsageError("NativeCausalLM.forward before allocate(batch_size, max_len)")
        if tokens.shape[0] != self.cache.batch_size:
            raise UsageError(f"batch of {tokens.shape[0]} rows for a cache allocated for {self.cache.batch_size}")
        if attn_mask is not None and not self.backend.supports_tree_masks:
            raise UsageError(f"attention backend {self.backend_name!r} cannot take custom masks; use 'sdpa'")
        return self.cache

    def _visible(self, slots: torch.Tensor, attn_mask: torch.Tensor | None) -> tuple[int, torch.Tensor | None]:
        """Slots to attend over (the highest written or visible one + 1) and the mask [B, 1, T, span]
        (None when it would be all True). With `static_shapes`, every slot of the cache and a mask
        built on the device: the same shapes at every step and no read back to the host, which a
        CUDA graph needs; the masked slots add nothing to the softmax."""
        if self.static_shapes:
            if attn_mask is None:
                attn_mask = torch.arange(self.cache.max_len, device=slots.device) <= slots[..., None]  # [B, T, S]
            return self.cache.max_len, attn_mask[:, None]
        if attn_mask is None:
            span = int(slots.max()) + 1
            if slots.shape == (1, 1):  # one query of one chain sees every slot up to its own
                return span, None
            mask = torch.arange(span, device=slots.device) <= slots[..., None]  # [B, T, span]
            return span, mask[:, None]
        visible = attn_mask.flatten(0, 1).any(0)  # [S_max]
        last = (visible * torch.arange(1, visible.shape[0] + 1, device=visible.device)).max()  # highest seen + 1
        span = int(torch.maximum(last, slots.max() + 1))
        return span, attn_mask[:, None, :, :span]  # [B, 1, T, span]

    def _attention(self, i: int, layer: DecoderLayer, x, cos, sin, index, mask, span: int) -> torch.Tensor:
        s = self.shape
        b, t, _ = x.shape
        h = F.rms_norm(x, (x.shape[-1],), layer.attn_norm, s.rms_norm_eps)  # [B, T, hidden]
        qkv = layer.qkv(h).view(b, t, s.num_heads + 2 * s.num_kv_heads, s.head_dim)  # [B, T, H+2Hkv, D]
        if layer.q_norm is None:
            qk = _rope(qkv[:, :, : s.num_heads + s.num_kv_heads], cos, sin)  # [B, T, H+Hkv, D]
            q, k = qk.split([s.num_heads, s.num_kv_heads], dim=2)
        else:
            q, k = qkv[:, :, : s.num_heads], qkv[:, :, s.num_heads : s.num_heads + s.num_kv_heads]
            q = _rope(F.rms_norm(q, (s.head_dim,), layer.q_norm, s.rms_norm_eps), cos, sin)  # [B, T, H, D]
            k = _rope(F.rms_norm(k, (s.head_dim,), layer.k_norm, s.rms_norm_eps), cos, sin)  # [B, T, Hkv, D]
        v = qkv[:, :, s.num_heads + s.num_kv_heads :]  # [B, T, Hkv, D]
        self.cache.write(i, index, k.transpose(1, 2), v.transpose(1, 2))
        k_all, v_all = self.cache.read(i, span)  # [B, Hkv, span, D]
        o = self.backend.attend(q.transpose(1, 2), k_all, v_all, mask, scale=self.scale)  # [B, H, T, D]
        return x + layer.o(o.transpose(1, 2).reshape(b, t, s.num_heads * s.head_dim))

    def _mlp(self, layer: DecoderLayer, x: torch.Tensor) -> torch.Tensor:
        h = F.rms_norm(x, (x.shape[-1],), layer.mlp_norm, self.shape.rms_norm_eps)  # [B, T, hidden]
        gate, up = layer.gate_up(h).chunk(2, dim=-1)  # [B, T, I] each
        return x + layer.down(F.silu(gate).mul_(up))

    def weight_bytes_per_forward(self) -> int:
        """Bytes of weights one forward reads: every projection, norm and the lm_head (not the embedding table)."""
        norms = [self.norm] + [n for l in self.layers for n in (l.attn_norm, l.mlp_norm, l.q_norm, l.k_norm)]
        linears = [self.lm_head] + [f for l in self.layers for f in (l.qkv, l.o, l.gate_up, l.down)]
        return sum(f.nbytes() for f in linears) + sum(n.numel() * n.element_size() for n in norms if n is not None)

    def describe(self) -> dict:
        """What the run manifest records about this engine."""
        return {"engine": "native", "model_type": self.shape.model_type, "weights": self.weights,
                "linear_kernel": self.lm_head.name, "dtype": str(self.dtype).removeprefix("torch."),
                "device": str(self.device), "attention_backend": self.backend_name,
                "weight_bytes_per_forward": self.weight_bytes_per_forward(), "kernels": self.kernels,
                **self._fused_record(), **self._skip_record()}

    def kernel_names(self) -> dict:
        """The kernels this model runs, by kind: what runs must be compared with what runs."""
        return {"linear": self.lm_head.name, "attention": self.backend_name,
                "dtype": str(self.dtype).removeprefix("torch."), **self._fused_record(), **self._skip_record(),
                **self._openmp_record()}

    def _openmp_record(self) -> dict:
        """`openmp_fallback` only where our C kernels run serial beside a second OpenMP runtime (gemv.py)."""
        ours = ("gemv", "packed_f32", "int8_dot", "int8_tiles", "int8_vnni")  # kernels built from our C sources
        uses_library = any(name in self.lm_head.name for name in ours) or self.fused is not None
        return {"openmp_fallback": why} if uses_library and (why := openmp_fallback()) else {}

    def _fused_record(self) -> dict:
        """`decode_step: fused` only where steps run decode_layer.c (other records stay as they were); with a row
        split, `fused<Nrows`: steps of N rows or more run the split's GEMM side on the Python path."""
        if self.fused is None:
            return {}
        limit = self.fused.row_limit
        return {"decode_step": "fused" if limit >= NO_LIMIT else f"fused<{limit}rows"}

    def _skip_record(self) -> dict:
        """The layers left out, only where there are some (full models' records stay as they were)."""
        return {"skipped_layers": list(self.skipped_layers)} if self.skipped_layers else {}


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
                                 allow_split=_room_for_two_layouts(shape, dtype), disabled=disabled, cache_path=cache)
    return ({"linear": choice.name, "linear_probe": choice.describe()},
            lambda w, b: make_dense(choice, w, b, device=device, dtype=dtype))


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
