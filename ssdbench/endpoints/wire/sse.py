"""Server-sent events as OpenAI-compatible servers stream them: `data: {json}` lines, a blank line
between events, `data: [DONE]` at the end. Each event is yielded with its arrival time.

A stream that ends without `[DONE]`, an event that is not JSON, or an `error` event raises
`RequestFailed`: the request failed, and the reason says how.
"""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Iterator

from ssdbench.endpoints.wire.http import RequestFailed, describe_os_error

DONE = "[DONE]"


def events(response: http.client.HTTPResponse, url: str, *, deadline_ns: int) -> Iterator[tuple[int, dict]]:
    """(perf_counter_ns at arrival, event) for each data event, until `[DONE]`."""
    data_lines: list[str] = []
    while True:
        if time.perf_counter_ns() > deadline_ns:
            raise RequestFailed(f"{url} took longer than --request-timeout-s")
        line = _read_line(response, url)
        if line is None:
            raise RequestFailed(f"{url} ended its stream before [DONE] (stream broken mid-way)")
        if line == "":  # a blank line ends an event
            if data_lines:
                payload = "\n".join(data_lines)
                data_lines = []
                if payload == DONE:
                    return
                yield time.perf_counter_ns(), _parse(payload, url)
            continue
        field, _, value = line.partition(":")
        if field == "data":
            data_lines.append(value[1:] if value.startswith(" ") else value)
        elif field == "error":  # llama-server's way of failing a stream
            raise RequestFailed(f"{url} sent an error event: {value.strip()[:200]}")


def _read_line(response: http.client.HTTPResponse, url: str) -> str | None:
    """One line without its ending; None at the end of the stream."""
    try:
        raw = response.readline()
    except (OSError, http.client.HTTPException) as err:
        raise RequestFailed(describe_os_error(url, err)) from None
    if not raw:
        return None
    return raw.decode("utf-8", "replace").rstrip("\r\n")


def _parse(payload: str, url: str) -> dict:
    try:
        event = json.loads(payload)
    except (ValueError, RecursionError):  # RecursionError: nested deeper than the parser goes
        raise RequestFailed(f"{url} sent a malformed event: {payload[:120]!r}") from None
    if not isinstance(event, dict):
        raise RequestFailed(f"{url} sent an event that is not a JSON object: {payload[:120]!r}")
    if "error" in event and "choices" not in event:
        error = event["error"]
        message = error.get("message", error) if isinstance(error, dict) else error
        raise RequestFailed(f"{url} sent an error event: {' '.join(str(message).split())[:200]}")
    return event
