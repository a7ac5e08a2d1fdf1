"""Before the run: is each endpoint there, which model does it serve, which engine is it.

A server that is down, a closed port or a model it does not serve is the user's to fix: one line
(`EndpointError`, exit 2) before the run directory is claimed or any model loaded. The engine kind
comes from what the server says of itself (`owned_by` in `/v1/models`), not from its URL; it decides
only which optional request fields ask for speculation figures, never how they are read. Whether
`GET /metrics` carries speculation counters (the acceptance fallback) is probed here too: a server
without them (404, or counters absent) simply gets no fallback, said in one line in the manifest. The
server's version and dtype come from the route where its engine describes itself (its declaration in
`engines/`: `self_report_route`, `version_key`, `dtype_of`); a route that fails or answers in another shape
leaves them unknown, never the run.
"""

from __future__ import annotations

from dataclasses import dataclass

from ssdbench.endpoints import dtypes
from ssdbench.endpoints.counters import CounterNames
from ssdbench.endpoints.engines.base import Engine
from ssdbench.endpoints.engines.registry import counter_families, counters_in, engine_named, kind_of
from ssdbench.endpoints.spec import Endpoint
from ssdbench.endpoints.wire.fields import MalformedAnswer, as_object, optional_list, optional_text, wrong
from ssdbench.endpoints.wire.http import RequestFailed, get_json, get_text
from ssdbench.errors import SsdbenchError

PROBE_TIMEOUT_S = 10.0
VERSION_CHARS = 200


class EndpointError(SsdbenchError):
    """An endpoint that cannot be used as given (down, wrong model, not OpenAI-compatible)."""


@dataclass(frozen=True)
class ServerInfo:
    kind: str  # llama.cpp, vllm, sglang, tensorrt-llm or openai-compatible
    model: str  # the model asked for in every request
    models_listed: tuple[str, ...]
    version: str | None  # what the server says of its version, where it does
    counters: CounterNames | None = None  # speculation counters on GET /metrics; None: no fallback
    counters_note: str = "GET /metrics not probed"
    dtype: str | None = None  # the dtype the server says it runs (`dtypes`), as it spells it; None: it does not say

    def describe(self) -> dict:
        return {"kind": self.kind, "model_reported": self.model, "models_listed": list(self.models_listed),
                "server_version": self.version, "acceptance_from_metrics": self.counters_note,
                "server_dtype": self.dtype, "near_tie_dtype": dtypes.float_dtype(self.dtype)}


def probe(endpoint: Endpoint, *, api_key: str | None = None, timeout_s: float = PROBE_TIMEOUT_S) -> ServerInfo:
    try:
        listing = get_json(endpoint.url, "/v1/models", timeout_s=timeout_s, api_key=api_key)
        ids, owned_by = _listed_models(listing)
    except MalformedAnswer as err:
        raise EndpointError(f"endpoint {endpoint.name}: {endpoint.url}/v1/models: {err}") from None
    except RequestFailed as err:
        raise EndpointError(f"endpoint {endpoint.name}: {err}") from None
    if not ids:
        raise EndpointError(f"endpoint {endpoint.name}: {endpoint.url}/v1/models lists no model "
                            "(is it an OpenAI-compatible server?)")
    model = _chosen_model(endpoint, ids)
    engine = engine_named(kind_of(owned_by or ""))
    metrics_text = _metrics_text(endpoint, api_key)
    counters, note = _metrics_support(metrics_text)
    own = _self_report(endpoint, engine, api_key)
    return ServerInfo(kind=engine.name, model=model, models_listed=ids, version=_version(engine, own),
                      counters=counters, counters_note=note, dtype=_dtype(engine, own, metrics_text))


def _listed_models(listing) -> tuple[tuple[str, ...], str | None]:
    """(the model ids /v1/models lists, the first one's `owned_by`), each field checked (MalformedAnswer)."""
    entries = optional_list(as_object(listing, "the answer").get("data"), "data") or []
    ids, owners = [], []
    for n, entry in enumerate(entries):
        entry = as_object(entry, f"data[{n}]")
        model_id = optional_text(entry.get("id"), f"data[{n}].id")
        if not model_id:
            raise wrong(f"data[{n}].id", "a model name", entry.get("id"))
        ids.append(model_id)
        owners.append(optional_text(entry.get("owned_by"), f"data[{n}].owned_by"))
    return tuple(ids), owners[0] if owners else None


def _chosen_model(endpoint: Endpoint, ids: tuple[str, ...]) -> str:
    if endpoint.model is None:
        if len(ids) > 1:
            raise EndpointError(f"endpoint {endpoint.name} serves {len(ids)} models ({', '.join(ids[:5])}); "
                                f"name one with --endpoint-model {endpoint.name}=MODEL")
        return ids[0]
    if endpoint.model not in ids:
        raise EndpointError(f"endpoint {endpoint.name} does not serve model '{endpoint.model}' "
                            f"(it lists: {', '.join(ids[:5])})")
    return endpoint.model


def _self_report(endpoint: Endpoint, engine: Engine, api_key: str | None) -> object:
    """What the server says of itself on its engine's route (any JSON value), or None where it has none or fails."""
    if engine.self_report_route is None:
        return None
    try:
        return get_json(endpoint.url, engine.self_report_route, timeout_s=PROBE_TIMEOUT_S, api_key=api_key)
    except RequestFailed:
        return None


def _version(engine: Engine, answer: object) -> str | None:
    """The server's own version string where its self-report has one; None where it does not say."""
    key = engine.version_key
    value = answer.get(key) if key and isinstance(answer, dict) else None  # any other shape says nothing
    return str(value)[:VERSION_CHARS] if isinstance(value, (str, int, float)) else None


def _dtype(engine: Engine, own: object, metrics_text: str | RequestFailed) -> str | None:
    """The dtype the server says it runs, where its engine says it (`Engine.dtype_of`); None where it does not."""
    if engine.dtype_of is None:
        return None
    return engine.dtype_of(own, None if isinstance(metrics_text, RequestFailed) else metrics_text)


def _metrics_text(endpoint: Endpoint, api_key: str | None) -> str | RequestFailed:
    try:
        return get_text(endpoint.url, "/metrics", timeout_s=PROBE_TIMEOUT_S, api_key=api_key)
    except RequestFailed as err:
        return err


def _metrics_support(text: str | RequestFailed) -> tuple[CounterNames | None, str]:
    """(the speculation counters GET /metrics exposes, or None; one line saying so, for the manifest)."""
    if isinstance(text, RequestFailed):
        return None, f"no fallback: GET /metrics failed ({text})"
    found = counters_in(text)
    if found is None:
        families = ", ".join(names.family for names in counter_families())
        return None, f"no fallback: GET /metrics has no speculation counters ({families})"
    return found.names, (f"fallback available: {found.names.family} read before and after each request at "
                         "concurrency 1, used where a response carries no verify steps")
