"""HTTP to an endpoint with the standard library: one connection per request, every failure one line.

Failures of a request (refused connection, a timeout, a 4xx/5xx status) raise `RequestFailed` with a
short reason; the runner decides whether that fails the request or the run.
"""

from __future__ import annotations

import http.client
import json
import socket
from urllib.parse import urlsplit

ERROR_BODY_CHARS = 200


class RequestFailed(Exception):
    """One request to an endpoint failed; `str(err)` is the reason, one line."""


def open_connection(base_url: str, *, timeout_s: float) -> http.client.HTTPConnection:
    parts = urlsplit(base_url)
    cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    return cls(parts.hostname, parts.port, timeout=timeout_s)


def headers(api_key: str | None, *, streaming: bool = False) -> dict[str, str]:
    values = {"Content-Type": "application/json", "Accept": "text/event-stream" if streaming else "application/json"}
    if api_key:
        values["Authorization"] = f"Bearer {api_key}"
    return values


def send(conn: http.client.HTTPConnection, method: str, url: str, path: str, *, body: dict | None = None,
         api_key: str | None = None, streaming: bool = False) -> http.client.HTTPResponse:
    """Send a request and return the response once its status is 2xx; RequestFailed otherwise."""
    full_path = urlsplit(url).path + path
    payload = None if body is None else json.dumps(body).encode()
    try:
        conn.request(method, full_path, body=payload, headers=headers(api_key, streaming=streaming))
        response = conn.getresponse()
    except (OSError, http.client.HTTPException) as err:
        raise RequestFailed(describe_os_error(url, err)) from None
    if response.status >= 400:
        raise RequestFailed(f"HTTP {response.status} {response.reason} from {url}{path}: {error_text(response)}")
    return response


def get_text(url: str, path: str, *, timeout_s: float, api_key: str | None = None) -> str:
    conn = open_connection(url, timeout_s=timeout_s)
    try:
        response = send(conn, "GET", url, path, api_key=api_key)
        try:
            return response.read().decode("utf-8", "replace")
        except (OSError, http.client.HTTPException) as err:
            raise RequestFailed(describe_os_error(url, err)) from None
    finally:
        conn.close()


def get_json(url: str, path: str, *, timeout_s: float, api_key: str | None = None) -> object:
    """The answer's JSON value, whatever its shape: the caller checks the fields it reads."""
    text = get_text(url, path, timeout_s=timeout_s, api_key=api_key)
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        raise RequestFailed(f"{url}{path} did not answer JSON") from None


def error_text(response: http.client.HTTPResponse) -> str:
    """The server's own error message where it sends JSON ({"error": {"message": ...}}), else its text."""
    try:
        raw = response.read(64 * 1024).decode("utf-8", "replace")
    except (OSError, http.client.HTTPException):
        return "(no body)"
    try:
        data = json.loads(raw)
        error = data.get("error", data) if isinstance(data, dict) else data
        message = error.get("message", error) if isinstance(error, dict) else error
        raw = str(message)
    except (ValueError, RecursionError):
        pass
    return " ".join(raw.split())[:ERROR_BODY_CHARS] or "(no body)"


def describe_os_error(url: str, err: BaseException) -> str:
    if isinstance(err, (socket.timeout, TimeoutError)):
        return f"no answer from {url} within the timeout"
    if isinstance(err, ConnectionRefusedError):
        return f"cannot connect to {url}: connection refused (is the server running?)"
    if isinstance(err, socket.gaierror):
        return f"cannot resolve the host of {url}"
    if isinstance(err, http.client.RemoteDisconnected) or isinstance(err, ConnectionResetError):
        return f"{url} closed the connection"
    if isinstance(err, http.client.IncompleteRead):
        return f"{url} broke off its answer mid-way"
    reason = getattr(err, "strerror", None) or str(err) or type(err).__name__
    return f"{url}: {reason}"
