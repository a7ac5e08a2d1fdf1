"""The dtype names of the command line (--dtype) and the torch dtypes they stand for."""

from __future__ import annotations

import torch

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def torch_dtype(name: str) -> torch.dtype:
    return DTYPES[name]
