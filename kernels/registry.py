"""Attention backends by name: `get_backend("sdpa")`, and what this machine can run."""

from __future__ import annotations

import difflib

import torch

from ssdbench.errors import UsageError
from ssdbench.kernels.base import AttentionBackend

DEFAULT_BACKEND = "sdpa"
BACKEND_NAMES = ("sdpa", "flash")


def _unavailable_reason(name: str, device: torch.device | str | None) -> str | None:
    if name == "flash":
        from ssdbench.kernels.flash import unavailable_reason

        return unavailable_reason(device)
    return None


def list_backends(device: torch.device | str | None = None) -> list[tuple[str, bool, str]]:
    """(name, available, reason) for every backend; reason is "" when available."""
    rows = []
    for name in BACKEND_NAMES:
        reason = _unavailable_reason(name, device)
        rows.append((name, reason is None, reason or ""))
    return rows


def get_backend(name: str = DEFAULT_BACKEND, *, device: torch.device | str | None = None) -> AttentionBackend:
    """The backend called `name`, ready for `device` (None: any device it supports).

    Unknown names and backends this machine cannot run raise UsageError with the fix.
    """
    key = name.strip().lower()
    if key not in BACKEND_NAMES:
        close = difflib.get_close_matches(key, BACKEND_NAMES, n=3, cutoff=0.4)
        hint = f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
        raise UsageError(f"unknown attention backend {name!r}: {hint}known: {', '.join(BACKEND_NAMES)}")
    reason = _unavailable_reason(key, device)
    if reason is not None:
        raise UsageError(f"attention backend {key!r} is unavailable: {reason}")
    if key == "flash":
        from ssdbench.kernels.flash import FlashBackend

        return FlashBackend()
    from ssdbench.kernels.sdpa import SdpaBackend

    return SdpaBackend()
