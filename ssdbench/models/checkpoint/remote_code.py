"""Model folders that ship their own Python: refused unless the user opts in.

transformers runs a folder's modules when its config.json (or tokenizer_config.json) maps an
Auto class to them (`auto_map`); asked with trust_remote_code unset, it even prompts on
stdin mid-run. ssdbench always passes the flag explicitly and refuses such folders up front.
"""

from __future__ import annotations

import json
from pathlib import Path

from ssdbench.errors import UsageError

TRUST_FLAG = "--trust-remote-code"
CODE_DECLARING_FILES = ("config.json", "tokenizer_config.json")


def declared_code(folder: Path) -> dict[str, dict]:
    """{file name: its auto_map} for each file of the folder that maps classes to the folder's code."""
    found = {}
    for name in CODE_DECLARING_FILES:
        data = _read_json(folder / name)
        auto_map = data.get("auto_map") if isinstance(data, dict) else None
        if auto_map:
            found[name] = auto_map
    return found


def check_remote_code(folder: Path, *, trust_remote_code: bool) -> None:
    """One-line UsageError for a folder declaring its own code, unless the user trusts it."""
    if trust_remote_code:
        return
    found = declared_code(folder)
    if found:
        name, auto_map = next(iter(found.items()))
        classes = ", ".join(f"{k}={v if isinstance(v, str) else '/'.join(map(str, v))}" for k, v in auto_map.items())
        raise UsageError(f"model folder {folder} ships its own code (auto_map in {name}: {classes}); ssdbench never "
                         f"runs a model folder's code unless you pass {TRUST_FLAG}")


def _read_json(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise UsageError(f"{path} is not readable JSON: {' '.join(str(err).split())}") from None
