"""Every decoding method, by name. Adding one: a module declaring `METHOD`, and a line here."""

from __future__ import annotations

import difflib

from ssdbench.errors import UsageError
from ssdbench.methods import ar, hf_assisted, hf_generate, hf_static, sd, ssd
from ssdbench.methods.base import Method

METHODS: dict[str, Method] = {m.name: m for m in (
    ar.METHOD,
    sd.METHOD,
    ssd.METHOD,
    hf_generate.METHOD,
    hf_static.METHOD,
    hf_assisted.METHOD,
)}


def get_method(name: str) -> Method:
    """The method called `name`, or a one-line UsageError that suggests the closest name."""
    if name in METHODS:
        return METHODS[name]
    close = difflib.get_close_matches(name, list(METHODS), n=1)
    hint = f"; did you mean '{close[0]}'?" if close else ""
    raise UsageError(f"--methods: unknown value '{name}'{hint} (choose from {', '.join(METHODS)})")
