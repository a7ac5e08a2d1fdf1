"""`ar`: autoregressive decoding, one target forward per token; the reference every method must match."""

from __future__ import annotations

from ssdbench.methods.base import Method, one_factory

METHOD = Method(
    name="ar",
    summary="autoregressive: one target forward per token (the reference)",
    proposers=lambda ctx: one_factory(lambda num_rows, generator: None),
)
