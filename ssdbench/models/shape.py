"""The architecture numbers of a Llama-family model, and the real shapes used for timing.

`ModelShape` is everything the native engine needs to lay out and run a model: read from
a transformers config (`ModelShape.from_hf_config`) or taken from `KNOWN_SHAPES`, the
published configs of the models in docs/DESIGN.md §4.5, which lets the engine build
random-weight models of real size where no weights can be had.
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass, field, replace

import torch

from ssdbench.errors import UsageError

SUPPORTED_MODEL_TYPES = ("llama", "qwen2", "qwen3")


@dataclass(frozen=True)
class RopeScaling:
    """RoPE frequency scaling: "linear" (divide by factor) or Llama-3's "llama3" smooth scaling."""

    rope_type: str
    factor: float
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position: int = 8192

    def apply(self, inv_freq: torch.Tensor) -> torch.Tensor:  # [D/2] -> [D/2]
        """Scaled inverse frequencies, computed exactly as transformers' rope utils do."""
        if self.rope_type == "linear":
            return inv_freq / self.factor
        low_wavelen = self.original_max_position / self.low_freq_factor
        high_wavelen = self.original_max_position / self.high_freq_factor
        wavelen = 2 * math.pi / inv_freq  # [D/2]
        scaled = torch.where(wavelen > low_wavelen, inv_freq / self.factor, inv_freq)  # [D/2]
        smooth = (self.original_max_position / wavelen - self.low_freq_factor) / (
            self.high_freq_factor - self.low_freq_factor
        )  # [D/2]
        smoothed = (1 - smooth) * scaled / self.factor + smooth * scaled  # [D/2]
        is_medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)  # [D/2]
        return torch.where(is_medium, smoothed, scaled)


@dataclass(frozen=True)
class ModelShape:
    """Sizes and options of a Llama / Qwen2 / Qwen3 decoder (SmolLM2 is a Llama)."""

    num_layers: int
    hidden: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tie_word_embeddings: bool
    rope_theta: float = 10000.0
    rope_scaling: RopeScaling | None = None
    rms_norm_eps: float = 1e-5
    has_qk_norm: bool = False  # Qwen3: RMSNorm over each head of q and k
    has_qkv_bias: bool = False  # Qwen2: bias on the q/k/v projections
    max_position: int = 8192
    model_type: str = field(default="llama", compare=False)

    def __post_init__(self) -> None:
        if self.num_heads % self.num_kv_heads:
            raise UsageError(f"num_heads {self.num_heads} is not a multiple of num_kv_heads {self.num_kv_heads}")

    @classmethod
    def from_hf_config(cls, config) -> "ModelShape":
        """Read a transformers Llama/Qwen2/Qwen3 config (v5 `rope_parameters` or older fields)."""
        model_type = getattr(config, "model_type", "llama")
        if model_type not in SUPPORTED_MODEL_TYPES:
            raise UsageError(f"the native engine runs {', '.join(SUPPORTED_MODEL_TYPES)} models, not {model_type!r}")
        if getattr(config, "hidden_act", "silu") != "silu" or getattr(config, "mlp_bias", False):
            raise UsageError("the native engine supports only SiLU MLPs without bias")
        if getattr(config, "use_sliding_window", False):
            raise UsageError("sliding-window attention is not supported by the native engine")
        heads = config.num_attention_heads
        theta, scaling = _read_rope(config)
        return cls(
            num_layers=config.num_hidden_layers,
            hidden=config.hidden_size,
            num_heads=heads,
            num_kv_heads=getattr(config, "num_key_value_heads", None) or heads,
            head_dim=getattr(config, "head_dim", None) or config.hidden_size // heads,
            intermediate=config.intermediate_size,
            vocab=config.vocab_size,
            tie_word_embeddings=bool(getattr(config, "tie_word_embeddings", False)),
            rope_theta=theta,
            rope_scaling=scaling,
            rms_norm_eps=config.rms_norm_eps,
            has_qk_norm=model_type == "qwen3",
            has_qkv_bias=model_type == "qwen2" or bool(getattr(config, "attention_bias", False)),
            max_position=config.max_position_embeddings,
            model_type=model_type,
        )

    def inv_freq(self) -> torch.Tensor:  # [D/2] fp32
        """RoPE inverse frequencies, scaling applied."""
        exponents = torch.arange(0, self.head_dim, 2, dtype=torch.int64).float() / self.head_dim  # [D/2]
        inv_freq = 1.0 / (self.rope_theta**exponents)  # [D/2]
        return self.rope_scaling.apply(inv_freq) if self.rope_scaling else inv_freq

    def tensor_parallel_shard(self, tp: int) -> "ModelShape":
        """What one of `tp` tensor-parallel ranks runs: 1/tp of the heads, KV heads and MLP columns
        (embedding, norms and lm_head whole); a one-line UsageError unless tp divides them."""
        if tp < 1:
            raise UsageError(f"--tp must be at least 1, not {tp}")
        for what, n in (("attention heads", self.num_heads), ("KV heads", self.num_kv_heads),
                        ("MLP intermediate size", self.intermediate)):
            if n % tp:
                raise UsageError(f"--tp {tp} does not divide the target's {n} {what}")
        return replace(self, num_heads=self.num_heads // tp, num_kv_heads=self.num_kv_heads // tp,
                       intermediate=self.intermediate // tp)

    def num_params(self) -> int:
        """Parameters of the checkpoint (a tied embedding counted once)."""
        embed = self.vocab * self.hidden
        return self._layer_params() * self.num_layers + self.hidden + embed * (1 if self.tie_word_embeddings else 2)

    def weight_bytes(self, dtype: torch.dtype = torch.bfloat16) -> int:
        """Bytes of all weights stored in `dtype` (the checkpoint / memory footprint)."""
        return self.num_params() * _itemsize(dtype)

    def weight_bytes_per_forward(self, dtype: torch.dtype = torch.bfloat16) -> int:
        """Bytes of weights one forward reads: all but the embedding table (only B*T rows of it are read)."""
        read = self._layer_params() * self.num_layers + self.hidden + self.vocab * self.hidden
        return read * _itemsize(dtype)

    def _layer_params(self) -> int:
        q, kv = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        attn = self.hidden * (q + 2 * kv) + q * self.hidden
        bias = (q + 2 * kv) if self.has_qkv_bias else 0
        norms = 2 * self.hidden + (2 * self.head_dim if self.has_qk_norm else 0)
        return attn + bias + 3 * self.hidden * self.intermediate + norms


def hf_param_shapes(shape: ModelShape) -> dict[str, tuple[int, ...]]:
    """Every parameter of the model in Hugging Face naming, with its shape ([out, in] for linears)."""
    q, kv, d = shape.num_heads * shape.head_dim, shape.num_kv_heads * shape.head_dim, shape.head_dim
    shapes = {"model.embed_tokens.weight": (shape.vocab, shape.hidden), "model.norm.weight": (shape.hidden,)}
    if not shape.tie_word_embeddings:
        shapes["lm_head.weight"] = (shape.vocab, shape.hidden)
    for i in range(shape.num_layers):
        p = f"model.layers.{i}."
        shapes[p + "input_layernorm.weight"] = (shape.hidden,)
        shapes[p + "post_attention_layernorm.weight"] = (shape.hidden,)
        for name, rows in (("q", q), ("k", kv), ("v", kv)):
            shapes[p + f"self_attn.{name}_proj.weight"] = (rows, shape.hidden)
            if shape.has_qkv_bias:
                shapes[p + f"self_attn.{name}_proj.bias"] = (rows,)
        shapes[p + "self_attn.o_proj.weight"] = (shape.hidden, q)
        if shape.has_qk_norm:
            shapes[p + "self_attn.q_norm.weight"] = (d,)
            shapes[p + "self_attn.k_norm.weight"] = (d,)
        shapes[p + "mlp.gate_proj.weight"] = (shape.intermediate, shape.hidden)
        shapes[p + "mlp.up_proj.weight"] = (shape.intermediate, shape.hidden)
        shapes[p + "mlp.down_proj.weight"] = (shape.hidden, shape.intermediate)
    return shapes


def _itemsize(dtype: torch.dtype) -> int:
    return dtype.itemsize


def _read_rope(config) -> tuple[float, RopeScaling | None]:
    params = dict(getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {})
    theta = float(params.get("rope_theta", getattr(config, "rope_theta", 10000.0)))
    rope_type = params.get("rope_type", params.get("type", "default"))
    if rope_type == "default":
        return theta, None
    if rope_type == "linear":
        return theta, RopeScaling("linear", float(params["factor"]))
    if rope_type == "llama3":
        return theta, RopeScaling(
            "llama3",
            float(params["factor"]),
            float(params["low_freq_factor"]),
            float(params["high_freq_factor"]),
            int(params["original_max_position_embeddings"]),
        )
    raise UsageError(f"RoPE type {rope_type!r} is not supported by the native engine (default, linear, llama3)")


def _llama31(layers: int, hidden: int, heads: int, mlp: int, *, factor: float, tied: bool) -> ModelShape:
    scaling = RopeScaling("llama3", factor, 1.0, 4.0, 8192)
    return ModelShape(layers, hidden, heads, 8, hidden // heads, mlp, 128256, tied, 500000.0, scaling, 1e-5,
                      max_position=131072)


def _qwen3(layers: int, hidden: int, heads: int, mlp: int, *, tied: bool) -> ModelShape:
    return ModelShape(layers, hidden, heads, 8, 128, mlp, 151936, tied, 1000000.0, None, 1e-6,
                      has_qk_norm=True, max_position=40960, model_type="qwen3")


# Published configs (docs/DESIGN.md §4.5); rope and eps from the models' config.json files.
KNOWN_SHAPES: dict[str, ModelShape] = {
    "llama-3.1-70b": _llama31(80, 8192, 64, 28672, factor=8.0, tied=False),
    "llama-3.1-8b": _llama31(32, 4096, 32, 14336, factor=8.0, tied=False),
    "llama-3.2-1b": _llama31(16, 2048, 32, 8192, factor=32.0, tied=True),
    "qwen3-32b": _qwen3(64, 5120, 64, 25600, tied=False),
    "qwen3-0.6b": _qwen3(28, 1024, 16, 3072, tied=True),
    "smollm2-135m": ModelShape(30, 576, 9, 3, 64, 1536, 49152, True, 100000.0, None, 1e-5, max_position=8192),
}


def known_shape(name: str) -> ModelShape:
    """The shape called `name` in KNOWN_SHAPES; unknown names raise UsageError with close matches."""
    key = name.strip().lower()
    if key not in KNOWN_SHAPES:
        close = difflib.get_close_matches(key, KNOWN_SHAPES, n=3, cutoff=0.5)
        hint = f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
        raise UsageError(f"unknown model shape {name!r}: {hint}known: {', '.join(KNOWN_SHAPES)}")
    return KNOWN_SHAPES[key]
