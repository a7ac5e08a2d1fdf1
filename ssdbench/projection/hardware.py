"""Datasheet figures of the GPUs a run can be projected onto (docs/DESIGN.md §7.5).

Bandwidth in TB/s (10^12 bytes/s), dense bf16 peak in TFLOP/s, memory in GB (10^9 bytes).
These are datasheet numbers, not measurements; the cost model scales them by an
efficiency factor (see ssdbench.projection.roofline).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from ssdbench.errors import UsageError


@dataclass(frozen=True)
class GpuSpec:
    name: str
    bandwidth_tbs: float
    bf16_tflops: float
    memory_gb: float


GPUS: dict[str, GpuSpec] = {
    "h100": GpuSpec("H100 SXM", 3.35, 989.0, 80.0),
    "h200": GpuSpec("H200 SXM", 4.8, 989.0, 141.0),
    "a100": GpuSpec("A100 SXM 80GB", 2.04, 312.0, 80.0),
    "l40s": GpuSpec("L40S", 0.86, 362.0, 48.0),
    "mi300x": GpuSpec("MI300X", 5.3, 1307.0, 192.0),
}

# Other spellings people type; keys are compared after lower-casing and dropping spaces.
_ALIASES = {"h100sxm": "h100", "h100-sxm": "h100", "h200sxm": "h200", "h200-sxm": "h200",
            "a100-80gb": "a100", "a100-sxm": "a100", "a10080gb": "a100", "a100sxm": "a100"}


def _key(name: str) -> str:
    return "".join(name.lower().split())


def gpu_spec(name: str) -> GpuSpec:
    """The GPU called `name` (any case); unknown names raise UsageError with close matches."""
    key = _key(name)
    key = _ALIASES.get(key, key)
    if key in GPUS:
        return GPUS[key]
    close = difflib.get_close_matches(key, [*GPUS, *_ALIASES], n=1, cutoff=0.5)
    hint = f"did you mean '{_ALIASES.get(close[0], close[0])}'? " if close else ""
    raise UsageError(f"unknown hardware '{name}': {hint}known: {', '.join(GPUS)}")


def parse_hardware(text: str) -> list[GpuSpec]:
    """A comma list of GPU names, e.g. 'h100,mi300x'; 'all' for the whole table."""
    names = [part.strip() for part in text.split(",") if part.strip()]
    if not names:
        raise UsageError("--hardware is empty; known: " + ", ".join(GPUS))
    if names == ["all"]:
        return list(GPUS.values())
    return [gpu_spec(name) for name in names]
