"""The fused decode step on CPU: decode_layer.c runs each decoder layer in one call, for any
number of token rows.

A decode step's ~20 small tensor operations per layer cost, launched from Python, about as
much as reading the weights (SmolLM2-135M's int8 draft step: 12.0 ms, of which ~6 ms int8
projections; fused, 8.4 ms). `FusedDecode` hands decode_layer.c each layer's weights once, as
pointers, and then runs a step's layers with one call each.

It takes any step the Python path (llama.py) takes: B sequences of T tokens each, over the
causal chain or an explicit mask (ssd's tree, a ragged batch); each weight is read once for all
B*T rows. It applies only where every projection of every layer runs one of our C kernels for that
many rows (`gemv`, `int8_gemv`, `int8_dot`, `int8_tiles`, `int8_vnni`, on either side of a row split; a step of
`row_limit` rows or more, given to another kernel, runs the Python path on it). The model
records `decode_step: fused` among its kernels when it qualifies (llama.py).
"""

from __future__ import annotations

import ctypes

import torch

from ssdbench.kernels.gemv import library
from ssdbench.kernels.linear import RowSplitLinear


class Projection(ctypes.Structure):
    """decode_layer.c's `projection`: int8 when scales is set; int8_inputs 0 (gemv.c), 1 (dot_i8.c), 2
    (tiles_i8.c, with its weight sums) or 3 (vnni_i8.c); float32 weights 0 (gemv.c) or 4 (packed_f32.c)."""

    _fields_ = [("w", ctypes.c_void_p), ("scales", ctypes.c_void_p), ("bias", ctypes.c_void_p),
                ("in_features", ctypes.c_int64), ("out_features", ctypes.c_int64), ("int8_inputs", ctypes.c_int32),
                ("wsum", ctypes.c_void_p)]


class LayerDims(ctypes.Structure):
    """decode_layer.c's `layer_dims`."""

    _fields_ = [("rows", ctypes.c_int64), ("batch", ctypes.c_int64), ("hidden", ctypes.c_int64),
                ("heads", ctypes.c_int64), ("kv_heads", ctypes.c_int64), ("head_dim", ctypes.c_int64),
                ("max_len", ctypes.c_int64), ("span", ctypes.c_int64), ("eps", ctypes.c_float),
                ("scale", ctypes.c_float), ("threads", ctypes.c_int32)]


NO_LIMIT = 1 << 62


def projection_for(linear, rows: int) -> Projection | None:
    """Our C kernel (gemv.c, dot_i8.c, tiles_i8.c, vnni_i8.c) that `linear` runs for a step of `rows` rows, as pointers;
    None when it runs another kernel for that many rows (a row split hands many rows to its other side).

    Their linears (`GemvLinear`, models/int8/'s `Int8GemvLinear`, `Int8DotLinear`, models/int8/tiles.py's
    `Int8TilesLinear`, models/int8/vnni.py's `Int8VnniLinear`) say so by their `gemv_pointers`: (weight, scales
    or None, bias or None, in_features, out_features[, int8 inputs: 1 for dot_i8.c, 2 for tiles_i8.c, 3 for
    vnni_i8.c[, weight sums]]).
    """
    if isinstance(linear, RowSplitLinear):
        return projection_for(linear.few if rows < linear.split_rows else linear.many, rows)
    pointers = getattr(linear, "gemv_pointers", None)
    return None if pointers is None else Projection(*pointers)


def one_row_projection(linear) -> Projection | None:
    """The kernel `linear` runs for one row, as pointers (None: not one of our C kernels)."""
    return projection_for(linear, 1)


def _split_rows(linear) -> set[int]:
    return {linear.split_rows} if isinstance(linear, RowSplitLinear) else set()


def _ptr(t: torch.Tensor | None):
    return None if t is None else t.data_ptr()


class FusedDecode:
    """A native model's layers as decode_layer.c calls (see the module docstring); `make` says if it qualifies."""

    def __init__(self, model) -> None:
        self._fn = library().ssdbench_decode_layer
        self.slot_block = library().ssdbench_slot_block()  # slots per transposed key block
        self.model = model
        linears = [f for l in model.layers for f in (l.qkv, l.o, l.gate_up, l.down)]
        # Row counts where some projection changes kernel: a regime per run of row counts between them.
        self.splits = sorted(set().union(*map(_split_rows, linears)))
        self._regimes: dict[int, list[tuple[Projection, ...]] | None] = {}  # kept alive: read by pointer
        uncovered = [s for s in self.splits if self._projections(s) is None]
        self.row_limit = min(uncovered, default=NO_LIMIT)  # steps of this many rows or more: the Python path
        self.norms = [(l.attn_norm.contiguous(), l.mlp_norm.contiguous(),
                       None if l.q_norm is None else l.q_norm.contiguous(),
                       None if l.k_norm is None else l.k_norm.contiguous()) for l in model.layers]

    @classmethod
    def make(cls, model) -> FusedDecode | None:
        """The fused step for `model`, or None where it does not apply (device, dtype, kernels, build)."""
        if torch.device(model.device).type != "cpu" or model.dtype != torch.float32 or model.shape.head_dim > 1024:
            return None
        if any(one_row_projection(f) is None for l in model.layers for f in (l.qkv, l.o, l.gate_up, l.down)):
            return None
        try:
            return cls(model)
        except OSError:  # the library cannot be built here: the Python path serves
            return None

    def add_key_blocks(self, cache) -> None:
        """Give `cache` the transposed key blocks this build's attention scores from (models/kv_cache.py)."""
        cache.add_key_blocks(self.slot_block)

    def _key_blocks(self, cache) -> list[int | None]:
        """Each layer's key-block pointer, or None per layer where the cache keeps none of this build's width
        (attention then transposes the keys itself)."""
        kb = cache.key_blocks
        if kb is None or kb.shape[-1] != self.slot_block:
            return [None] * cache.k.shape[0]
        return [kb[i].data_ptr() if kb[i].is_contiguous() else None for i in range(kb.shape[0])]

    def _projections(self, rows: int) -> list[tuple[Projection, ...]] | None:
        """Each layer's (qkv, o, gate_up, down) for a step of `rows` rows, or None where one is not ours."""
        regime = sum(rows >= s for s in self.splits)
        if regime not in self._regimes:
            layers = [tuple(projection_for(f, rows) for f in (l.qkv, l.o, l.gate_up, l.down))
                      for l in self.model.layers]
            self._regimes[regime] = None if any(p is None for each in layers for p in each) else layers
        return self._regimes[regime]

    def covers(self, rows: int) -> bool:
        """Whether a step of `rows` token rows runs here: the probe gave that many rows to our C kernels."""
        return rows < self.row_limit and self._projections(rows) is not None

    def run(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, slots: torch.Tensor,
            mask: torch.Tensor | None = None) -> torch.Tensor:
        """x [B, T, hidden] after the embedding -> the residual stream after the last layer [B, T, hidden].

        cos, sin [B, T, 1, D] at each token's position; slots [B, T], each token's cache slot; mask
        [B, T, span] bool (which slots each token sees) or None for the causal chain by slot.
        """
        s, cache = self.model.shape, self.model.cache
        b, t, _ = x.shape
        rows = b * t
        x = x.reshape(rows, -1).contiguous()  # [N, hidden]
        cos, sin = cos.reshape(rows, -1).contiguous(), sin.reshape(rows, -1).contiguous()  # [N, D]
        slots = slots.reshape(-1).to(torch.int64).contiguous()  # [N]
        seq = torch.arange(b, dtype=torch.int64).repeat_interleave(t)  # [N]: each row's cache row
        span = 0
        if mask is not None:
            span = mask.shape[-1]
            mask = mask.reshape(rows, span).to(torch.uint8).contiguous()  # [N, span]
        dims = LayerDims(rows, cache.batch_size, s.hidden, s.num_heads, s.num_kv_heads, s.head_dim, cache.max_len,
                         span, s.rms_norm_eps, self.model.scale, torch.get_num_threads())
        mask_ptr = ctypes.c_void_p(_ptr(mask))
        key_blocks = self._key_blocks(cache)
        for i, ((qkv, o, gate_up, down), (attn_norm, mlp_norm, q_norm, k_norm)) in enumerate(
                zip(self._projections(rows), self.norms)):
            status = self._fn(
                ctypes.c_void_p(x.data_ptr()), ctypes.c_void_p(attn_norm.data_ptr()),
                ctypes.c_void_p(mlp_norm.data_ptr()), ctypes.byref(qkv), ctypes.byref(o), ctypes.byref(gate_up),
                ctypes.byref(down), ctypes.c_void_p(_ptr(q_norm)), ctypes.c_void_p(_ptr(k_norm)),
                ctypes.c_void_p(cos.data_ptr()), ctypes.c_void_p(sin.data_ptr()),
                ctypes.c_void_p(cache.k[i].data_ptr()), ctypes.c_void_p(key_blocks[i]),
                ctypes.c_void_p(cache.v[i].data_ptr()),
                ctypes.c_void_p(seq.data_ptr()), ctypes.c_void_p(slots.data_ptr()), mask_ptr, ctypes.byref(dims))
            if status == -2:
                raise IndexError(f"a cache slot outside [0, {cache.max_len}) or a span past it: "
                                 f"slots {slots.min().item()}..{slots.max().item()}, span {span}")
            if status == -3:
                raise RuntimeError("tiles_i8.c: AMX tiles cannot run in this process")
            if status != 0:
                raise MemoryError("decode_layer.c could not allocate its scratch memory")
        return x.view(b, t, -1)
