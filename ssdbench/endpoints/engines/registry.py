"""Every serving engine ssdbench knows, by name. Adding one: a module in `engines/` declaring `ENGINE`
(`base.py:Engine`), and a line here. `openai_compatible` is the fallback for a server no engine claims.

Everything else asks here: preflight (`kind_of`, the engine's self-report), the runner (`engine_named`:
its request fields), the acceptance reading (`detect`, every engine's shapes), the /metrics fallback
(`counters_in`), the checks (`engine_reading`) and the summary (`engine_of_source`). The lookups read
`ENGINES` when called, so a test may declare an engine by replacing the tuple for its duration.
"""

from __future__ import annotations

from collections.abc import Iterable

from ssdbench.endpoints.acceptance import Acceptance, BadFigure
from ssdbench.endpoints.counters import CounterNames, SpecCounters, reading_of
from ssdbench.endpoints.engines import llama_cpp, openai_compatible, sglang, ssdbench_server, trtllm, vllm
from ssdbench.endpoints.engines.base import Engine
from ssdbench.endpoints.wire.prometheus import parse_samples

ENGINES: tuple[Engine, ...] = (
    llama_cpp.ENGINE,
    vllm.ENGINE,
    sglang.ENGINE,
    trtllm.ENGINE,
    ssdbench_server.ENGINE,
    openai_compatible.ENGINE,
)
FALLBACK = openai_compatible.ENGINE.name


def engine_named(name: str) -> Engine:
    """The engine of that kind (a ServerInfo's `kind`); KeyError where none is."""
    for engine in ENGINES:
        if engine.name == name:
            return engine
    raise KeyError(name)


def kind_of(owned_by: str) -> str:
    """The kind of a server whose /v1/models says `owned_by`: the engine that claims the name, else the fallback."""
    owner = owned_by.strip().lower()
    for engine in ENGINES:
        if owner in engine.owned_by:
            return engine.name
    return FALLBACK


def read(event: dict) -> Acceptance | None:
    """The first engine's figures the event carries; a figure of the wrong type or range makes them invalid
    (the request stands). Whether they agree with one another is `consistency`'s to check."""
    for engine in sorted(ENGINES, key=lambda e: e.read_last):  # a stable sort: the registry's order otherwise
        for source, parse in engine.readers:
            try:
                reading = parse(event)
            except BadFigure as err:
                return Acceptance(source, invalid=str(err))
            if reading is not None:
                return reading
    return None


def detect(events: Iterable[dict]) -> Acceptance | None:
    """The request's acceptance: the last event that carries any engine's fields (they are totals
    for the request so far, so the last one is the whole request's)."""
    found = None
    for event in events:
        found = read(event) or found
    return found


def counter_families() -> tuple[CounterNames, ...]:
    """The speculation counters each engine that has them exposes on /metrics, in the registry's order."""
    return tuple(engine.counters for engine in ENGINES if engine.counters is not None)


def counters_in(text: str) -> SpecCounters | None:
    """The first engine's counters that are all present in the /metrics text, or None."""
    samples = parse_samples(text)
    for names in counter_families():
        reading = reading_of(samples, names)
        if reading is not None:
            return reading
    return None


def engine_reading(source: str) -> Engine | None:
    """The engine one of whose response shapes records exactly this acceptance source."""
    return next((engine for engine in ENGINES if source in engine.sources), None)


def engine_of_source(source: str) -> Engine | None:
    """The engine an acceptance source belongs to: a response shape's (alone or joined with the counters, as
    `llama.cpp timings.draft_n + prometheus ...`), or its /metrics counters'."""
    for engine in ENGINES:
        if any(source == s or source.startswith(s + " ") for s in engine.sources):
            return engine
        if engine.counters is not None and source == engine.counters.source:
            return engine
    return None
