"""Before the run: is each endpoint there, which model does it serve, which engine is it.

A server that is down, a closed port or a model it does not serve is the user's to fix: one line
(`EndpointError`, exit 2) before the run directory is claimed or any model loaded. The engine kind
comes from what the server says of itself (`owned_by` in `/v1/models`), not from its URL; it decides
only which optional request fields ask for speculation figures, never how they are read.
"""

from __future__ import annotations

from dataclasses import dataclass

from ssdbench.endpoints.http import RequestFailed, get_json
from ssdbench.endpoints.kinds import kind_of
from ssdbench.endpoints.spec import Endpoint
from ssdbench.errors import SsdbenchError

PROBE_TIMEOUT_S = 10.0


class EndpointError(SsdbenchError):
    """An endpoint that cannot be used as given (down, wrong model, not OpenAI-compatible)."""


@dataclass(frozen=True)
class ServerInfo:
    kind: str  # llama.cpp, vllm, sglang, tensorrt-llm or openai-compatible
    model: str  # the model asked for in every request
    models_listed: tuple[str, ...]
    version: str | None  # what the server says of its version, where it does

    def describe(self) -> dict:
        return {"kind": self.kind, "model_reported": self.model, "models_listed": list(self.models_listed),
                "server_version": self.version}


def probe(endpoint: Endpoint, *, api_key: str | None = None, timeout_s: float = PROBE_TIMEOUT_S) -> ServerInfo:
    try:
        listing = get_json(endpoint.url, "/v1/models", timeout_s=timeout_s, api_key=api_key)
    except RequestFailed as err:
        raise EndpointError(f"endpoint {endpoint.name}: {err}") from None
    entries = [e for e in listing.get("data") or () if isinstance(e, dict) and e.get("id")]
    if not entries:
        raise EndpointError(f"endpoint {endpoint.name}: {endpoint.url}/v1/models lists no model "
                            "(is it an OpenAI-compatible server?)")
    ids = tuple(str(e["id"]) for e in entries)
    model = _chosen_model(endpoint, ids)
    kind = kind_of(str(entries[0].get("owned_by") or ""))
    return ServerInfo(kind=kind, model=model, models_listed=ids, version=_version(endpoint, kind, api_key))


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


def _version(endpoint: Endpoint, kind: str, api_key: str | None) -> str | None:
    """The server's own version string where it has a route for it; None where it does not say."""
    path, key = {"llama.cpp": ("/props", "build_info"), "vllm": ("/version", "version"),
                 "sglang": ("/get_server_info", "version")}.get(kind, (None, None))
    if path is None:
        return None
    try:
        value = get_json(endpoint.url, path, timeout_s=PROBE_TIMEOUT_S, api_key=api_key).get(key)
    except RequestFailed:
        return None
    return str(value) if value is not None else None
