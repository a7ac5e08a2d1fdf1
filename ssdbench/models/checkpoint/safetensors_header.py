"""Reading safetensors headers (no tensor data) to catch damaged or mismatched weights early.

A safetensors file is an 8-byte little-endian header length N, N bytes of JSON mapping each
tensor name to its dtype, shape and [begin, end) byte span in the data that follows. From
the header alone we can tell a truncated download, a file that is not safetensors at all,
and tensors whose names or shapes disagree with config.json, before loading anything.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass
from pathlib import Path

from ssdbench.errors import UsageError

DTYPE_BYTES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
               "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8}
MAX_HEADER_BYTES = 100 * 2**20  # safetensors' own limit


@dataclass(frozen=True)
class TensorEntry:
    file: Path
    dtype: str
    shape: tuple[int, ...]
    num_bytes: int


def read_header(file: Path) -> dict[str, TensorEntry]:
    """Every tensor the file describes; a one-line UsageError if the file is not whole, valid safetensors."""
    size = file.stat().st_size
    with open(file, "rb") as f:
        prefix = f.read(8)
        if len(prefix) < 8:
            raise UsageError(f"weight file {file} is not a safetensors file: only {size} bytes")
        (header_len,) = struct.unpack("<Q", prefix)
        if header_len > min(MAX_HEADER_BYTES, size - 8):
            raise UsageError(f"weight file {file} is truncated or not a safetensors file: its header length says "
                             f"{header_len} bytes, the file has {size}")
        raw = f.read(header_len)
    try:
        header = json.loads(raw)
    except (UnicodeDecodeError, ValueError):
        raise UsageError(f"weight file {file} has an unreadable safetensors header (damaged?)") from None
    if not isinstance(header, dict):
        raise UsageError(f"weight file {file} has an unreadable safetensors header (damaged?)")
    entries = {name: _entry(file, name, spec) for name, spec in header.items() if name != "__metadata__"}
    _check_data_size(file, header, size - 8 - header_len)
    return entries


def _entry(file: Path, name: str, spec) -> TensorEntry:
    try:
        dtype, shape = spec["dtype"], tuple(int(n) for n in spec["shape"])
        begin, end = (int(n) for n in spec["data_offsets"])
    except (KeyError, TypeError, ValueError):
        raise UsageError(f"weight file {file}: tensor {name!r} has a malformed header entry") from None
    if dtype not in DTYPE_BYTES:
        raise UsageError(f"weight file {file}: tensor {name!r} has unknown dtype {dtype!r}")
    expected = math.prod(shape) * DTYPE_BYTES[dtype]
    if end - begin != expected:
        raise UsageError(f"weight file {file}: tensor {name!r} ({dtype}, shape {list(shape)}) needs {expected} bytes, "
                         f"the header gives it {end - begin}")
    return TensorEntry(file, dtype, shape, expected)


def _check_data_size(file: Path, header: dict, data_bytes: int) -> None:
    described = max((spec["data_offsets"][1] for name, spec in header.items() if name != "__metadata__"), default=0)
    if described > data_bytes:
        raise UsageError(f"weight file {file} is truncated: its header describes {described} bytes of tensor data, "
                         f"the file holds {data_bytes} (re-download or re-save it)")


def read_headers(files: list[Path]) -> dict[str, TensorEntry]:
    """All tensors of a (possibly sharded) checkpoint; a tensor in two shards is an error."""
    entries: dict[str, TensorEntry] = {}
    for file in files:
        for name, entry in read_header(file).items():
            if name in entries:
                raise UsageError(f"tensor {name!r} is in both {entries[name].file.name} and {file.name}")
            entries[name] = entry
    return entries


def check_against_shapes(entries: dict[str, TensorEntry], expected: dict[str, tuple[int, ...]], *, folder: Path) -> None:
    """Every parameter the config implies is present with its shape (extra tensors are ignored)."""
    missing = [name for name in expected if name not in entries]
    if missing:
        raise UsageError(f"model folder {folder}: the weights lack {len(missing)} tensor(s) config.json implies, "
                         f"e.g. {missing[0]!r}")
    for name, shape in expected.items():
        if entries[name].shape != shape:
            raise UsageError(f"model folder {folder}: tensor {name!r} has shape {list(entries[name].shape)} in "
                             f"{entries[name].file.name}, config.json implies {list(shape)}")
