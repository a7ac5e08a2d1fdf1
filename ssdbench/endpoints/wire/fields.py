"""Fields of a server's JSON answer, read with their type and range checked where they are read.

A server may send well-formed JSON of any shape. A field of the wrong type or out of range fails the
request it came in (`MalformedAnswer`, a `RequestFailed`), with one line naming the field and what came:
`choices: expected a list, got int 5`. Absent and null fields read as None wherever the field is optional.
"""

from __future__ import annotations

import json
import math

from ssdbench.endpoints.wire.http import RequestFailed

COUNT_MAX = 2**31 - 1  # counts and token ids are stored as int32 (records.schema)
SHOWN_CHARS = 60


class MalformedAnswer(RequestFailed):
    """Well-formed JSON of the wrong shape: the request fails, the reason names the field."""


def describe(value) -> str:
    """What came, for an error line: its JSON type and a short rendering (`int 5`, `string 'abc'`)."""
    shown = json.dumps(value, allow_nan=True, default=str) if not isinstance(value, str) else repr(value)
    if len(shown) > SHOWN_CHARS:
        shown = shown[:SHOWN_CHARS] + "..."
    return f"{json_type(value)} {shown}"


def json_type(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    return {str: "string", list: "list", dict: "object"}.get(type(value), type(value).__name__)


def wrong(where: str, expected: str, value) -> MalformedAnswer:
    return MalformedAnswer(f"{where}: expected {expected}, got {describe(value)}")


def as_object(value, where: str) -> dict:
    if not isinstance(value, dict):
        raise wrong(where, "an object", value)
    return value


def as_list(value, where: str) -> list:
    if not isinstance(value, list):
        raise wrong(where, "a list", value)
    return value


def optional_object(value, where: str) -> dict | None:
    return None if value is None else as_object(value, where)


def optional_list(value, where: str) -> list | None:
    return None if value is None else as_list(value, where)


def optional_text(value, where: str) -> str | None:
    """A string or nothing; one with lone surrogates (JSON `\\ud800`) is no text a tokenizer or Parquet takes."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise wrong(where, "a string", value)
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise MalformedAnswer(f"{where}: not valid Unicode text (a lone surrogate): {value[:SHOWN_CHARS]!r}") from None
    return value


def is_count(value) -> bool:
    """A whole number in [0, COUNT_MAX]; a float with no fraction counts (some engines send 3.0)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    if isinstance(value, float) and (not math.isfinite(value) or value != int(value)):
        return False
    return 0 <= value <= COUNT_MAX


def count_or_none(value, where: str) -> int | None:
    """A count as an int; None when absent; MalformedAnswer when not a count."""
    if value is None:
        return None
    if not is_count(value):
        raise wrong(where, f"a whole number from 0 to {COUNT_MAX}", value)
    return int(value)


def token_ids(value, where: str) -> tuple[int, ...] | None:
    """A list of token ids (whole numbers from 0 to COUNT_MAX), or None when absent."""
    items = optional_list(value, where)
    if items is None:
        return None
    for i, item in enumerate(items):
        if not is_count(item):
            raise wrong(f"{where}[{i}]", f"a token id from 0 to {COUNT_MAX}", item)
    return tuple(int(item) for item in items)
