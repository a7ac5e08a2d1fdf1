"""The dtype a server says it runs, and the float dtype whose rounding bounds its near-ties.

Where each engine says it (probed once, `preflight`):
- llama.cpp `llama-server`: `GET /props` `model_ftype`, the GGUF's file type (`F16`, `BF16`, `all F32`, `Q4_0`,
  with `(guessed) ` before it when the file did not say);
- vLLM: `GET /metrics` `vllm:model_config_info{dtype="bfloat16",...}` where the version exports that gauge (its
  `/v1/models` names no dtype; `torch.bfloat16` reads the same);
- SGLang: `GET /get_server_info` `dtype` (its server argument; `auto` says nothing and reads as unknown), assumed
  from its documentation and untested here.
Any other server, or an answer without the field, is unknown (None). A quantised type (`Q4_0`, `fp8`) has no
float epsilon to bound a near-tie with: the greedy departures of such a server are unverifiable.
"""

from __future__ import annotations

from ssdbench.endpoints.prometheus import parse_samples

DTYPE_CHARS = 40
# a server's spelling -> the float dtype whose epsilon bounds its roundings
FLOAT_DTYPES = {"float32": "float32", "fp32": "float32", "f32": "float32", "all f32": "float32",
                "float16": "float16", "half": "float16", "fp16": "float16", "f16": "float16",
                "bfloat16": "bfloat16", "bf16": "bfloat16"}
GUESSED = "(guessed) "


def float_dtype(server_dtype: str | None) -> str | None:
    """`float32`, `float16` or `bfloat16` for a server dtype that is one of them; None where it is unknown or
    quantised."""
    if server_dtype is None:
        return None
    name = server_dtype.strip().lower()
    for prefix in (GUESSED, "torch."):  # llama.cpp's guessed file types; a torch dtype written with str()
        name = name[len(prefix):] if name.startswith(prefix) else name
    return FLOAT_DTYPES.get(name)


def text_or_none(value) -> str | None:
    """A dtype as the server wrote it, shortened; None for anything that is no non-empty string."""
    return value.strip()[:DTYPE_CHARS] or None if isinstance(value, str) else None


def from_llama_props(props) -> str | None:
    return text_or_none(props.get("model_ftype")) if isinstance(props, dict) else None


def from_sglang_info(info) -> str | None:
    found = text_or_none(info.get("dtype")) if isinstance(info, dict) else None
    return None if found is None or found.lower() == "auto" else found


def from_vllm_metrics(text: str) -> str | None:
    for sample in parse_samples(text):
        if sample.name == "vllm:model_config_info" and "dtype" in sample.labels:
            return text_or_none(sample.labels["dtype"])
    return None
