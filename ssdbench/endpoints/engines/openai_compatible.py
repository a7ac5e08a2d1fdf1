"""Any other OpenAI-compatible server: the fallback kind, for an `owned_by` no engine claims.

It adds nothing to a request and has no shape of its own; a response that carries a known engine's
shape is still read (the registry reads every engine's shapes, whatever the kind).
"""

from __future__ import annotations

from ssdbench.endpoints.engines.base import Engine

ENGINE = Engine(
    "openai-compatible", acceptance_source="none",
    note="any other server: timings and outputs; acceptance where a response carries a known shape",
)
