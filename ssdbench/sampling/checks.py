"""The rule for sampling settings, in one place and free of torch (the CLI checks options before loading it)."""

from __future__ import annotations

from ssdbench.errors import UsageError


def check_sampling(temperature: float, top_p: float, top_k: int = 0, *,
                   names: tuple[str, str, str] = ("temperature", "top-p", "top-k")) -> None:
    """The one rule for sampling settings, wherever they come from; `names` are how the caller's user wrote
    them (the CLI's "--temperature", "--draft-temperature", ...)."""
    if not temperature >= 0:  # NaN fails too
        raise UsageError(f"{names[0]} must be >= 0, got {temperature}")
    if not 0 < top_p <= 1:
        raise UsageError(f"{names[1]} must be in (0, 1], got {top_p}")
    if top_k < 0:
        raise UsageError(f"{names[2]} must be >= 0, got {top_k}")
