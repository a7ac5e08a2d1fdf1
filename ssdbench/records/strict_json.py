"""JSON that strict parsers accept: no NaN or Infinity tokens, ever.

Settings are refused when non-finite (config.py); a measurement that comes out non-finite
(a rate over zero time, an empty mean) is written as null rather than as `NaN`.
"""

from __future__ import annotations

import json
import math
from typing import Any


def finite_or_none(value: Any) -> Any:
    """`value` with every non-finite float (at any depth) replaced by None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite_or_none(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_or_none(v) for v in value]
    return value


def dumps(value: Any, **kwargs) -> str:
    """json.dumps with allow_nan=False, after nulling non-finite floats; `default` runs first for odd types."""
    default = kwargs.pop("default", None)
    if default is not None:
        value = json.loads(json.dumps(value, default=default))  # resolve numpy scalars etc. to plain values
    return json.dumps(finite_or_none(value), allow_nan=False, **kwargs)
