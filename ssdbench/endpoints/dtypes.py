"""The dtype a server says it runs, and the float dtype whose rounding bounds its near-ties.

Where each engine says it is its own declaration's (`Engine.dtype_of`, in `engines/`: llama-server's
`/props` `model_ftype`, vLLM's `/metrics` `vllm:model_config_info`, SGLang's `/get_server_info` `dtype`),
probed once by `preflight`. Any other server, or an answer without the field, is unknown (None). A
quantised type (`Q4_0`, `fp8`) has no float epsilon to bound a near-tie with: the greedy departures of
such a server are unverifiable.
"""

from __future__ import annotations

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
