"""Paths a user typed that exist in name but cannot be used (symlink loops, no permission)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

from ssdbench.errors import UsageError

_ABSENT = (errno.ENOENT, errno.ENOTDIR)  # plainly not there: each caller says where it looked instead


def check_reachable(path: Path, *, what: str) -> None:
    """One-line UsageError when `path` cannot even be looked at (e.g. a symlink loop); absence is fine."""
    try:
        os.stat(path)
    except OSError as err:
        if err.errno in _ABSENT:
            return
        reason = "a symlink loop" if err.errno == errno.ELOOP else (err.strerror or str(err)).lower()
        raise UsageError(f"{what} {path} cannot be used: {reason}") from None
