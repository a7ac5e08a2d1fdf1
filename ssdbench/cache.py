"""ssdbench's one cache root, for everything it keeps between runs: converted models, built kernels, the
kernel probe's and bandwidth's per-machine JSON, the llama.cpp server build.

The root is `$SSDBENCH_CACHE_DIR` where set, else `$XDG_CACHE_HOME/ssdbench`, else `~/.cache/ssdbench`;
read at call time (tests and users may set it late), nothing created here.
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_root(cache_dir: Path | str | None = None) -> Path:
    """`cache_dir` where given, else the root above."""
    if cache_dir is not None:
        return Path(cache_dir).expanduser()
    if os.environ.get("SSDBENCH_CACHE_DIR"):
        return Path(os.environ["SSDBENCH_CACHE_DIR"]).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "ssdbench"


def cache_file(name: str) -> Path:
    """`<root>/<name>`: a file or folder of the cache."""
    return cache_root() / name
