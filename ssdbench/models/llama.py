"""The native Llama-family decoder: Llama 3.x, SmolLM2, Qwen2/2.5 (qkv bias), Qwen3 (qk norm).

Laid out for memory-bound decoding: q/k/v fused into one projection and gate/up into
another, a separate lm_head even when tied, RoPE tables gathered by logical position.
Projections are dense kernels from ssdbench.kernels.linear (oneDNN-packed weights on CPU,
transposed `x @ w_t` elsewhere) or weight-only int8 (int8/); build.py builds it.
The KV cache is static and slot-indexed (kv_cache.py); attention goes through a
pluggable backend (ssdbench.kernels) with an explicit boolean mask, so the same forward
runs a causal chain, a batch of rows of different lengths, or SSD's draft tree.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

from ssdbench.errors import UsageError
from ssdbench.kernels.base import AttentionBackend
from ssdbench.kernels.decode_layer import NO_LIMIT, FusedDecode
from ssdbench.kernels.gemv import openmp_fallback
from ssdbench.models.kv_cache import StaticKVCache
from ssdbench.models.shape import ModelShape

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
        if self.fused is not None:  # its attention reads the keys in transposed blocks
            self.fused.add_key_blocks(self.cache)
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
