"""A server started by the run (`--endpoint-launch NAME='command'`): started, waited for, stopped.

The command runs in a shell in a session (process group) of its own, its output kept in a log file;
the run waits until the endpoint answers `/v1/models` with a model, up to a timeout. Leaving the
`with` block for any reason (the run's end, a failure, Ctrl-C, SIGTERM, which cli/signals.py turns
into an exception) stops the whole group: SIGTERM, then SIGKILL after a grace period, and returns only
once every process of the group has exited (the shell may not `exec` the server, so the shell's exit
says nothing about the server's: a server still closing would answer the next request). The launcher
also refuses to start when something already answers at the endpoint's URL (it would be measured in
place of the launched server).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from ssdbench.endpoints.preflight import EndpointError
from ssdbench.endpoints.spec import Endpoint
from ssdbench.endpoints.wire.http import RequestFailed, get_json

POLL_S = 0.25
STOP_GRACE_S = 10.0
LOG_TAIL_LINES = 5


@contextlib.contextmanager
def launched(endpoint: Endpoint, log_path: Path, *, ready_timeout_s: float) -> Iterator[subprocess.Popen]:
    """Start `endpoint.launch`, wait until it serves, yield the process; always stop it afterwards."""
    if _answers(endpoint.url):
        raise EndpointError(f"endpoint {endpoint.name}: something already answers at {endpoint.url}; stop it or "
                            "give the launched server another port")
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        process = subprocess.Popen(endpoint.launch, shell=True, stdout=log, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_ready(endpoint, process, log_path, timeout_s=ready_timeout_s)
        yield process
    finally:
        stop(process)


def wait_ready(endpoint: Endpoint, process: subprocess.Popen, log_path: Path, *, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        code = process.poll()
        if code is not None:
            raise EndpointError(f"endpoint {endpoint.name}: the launched server exited with code {code} before it "
                                f"was ready; log {log_path}: {_tail(log_path)}")
        if _answers(endpoint.url):
            return
        time.sleep(POLL_S)
    raise EndpointError(f"endpoint {endpoint.name}: the launched server was not ready within {timeout_s:g} s "
                        f"(--endpoint-ready-timeout-s); log {log_path}: {_tail(log_path)}")


def stop(process: subprocess.Popen) -> None:
    """SIGTERM to the server's process group, SIGKILL if it lingers; the group is gone afterwards."""
    if process.poll() is None:
        deadline = time.monotonic() + STOP_GRACE_S
        _kill_group(process.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=STOP_GRACE_S)
        _wait_group_gone(process.pid, timeout_s=max(0.0, deadline - time.monotonic()))
    _kill_group(process.pid, signal.SIGKILL)  # what lingers, and children the shell left behind
    process.wait()
    _wait_group_gone(process.pid, timeout_s=STOP_GRACE_S)


def _wait_group_gone(pgid: int, *, timeout_s: float) -> None:
    """Until no live process is left in the group (zombies awaiting their reaper count as gone)."""
    deadline = time.monotonic() + timeout_s
    while _group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.02)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    if not os.path.isdir("/proc"):
        return True
    for entry in os.listdir("/proc"):
        if entry.isdigit() and _live_member(int(entry), pgid):
            return True
    return False


def _live_member(pid: int, pgid: int) -> bool:
    """Whether /proc/PID/stat shows a process of group `pgid` that is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            after_name = f.read().rsplit(b")", 1)[1].split()  # state, ppid, pgrp, ...
    except (OSError, IndexError):
        return False
    return len(after_name) > 2 and after_name[2] == str(pgid).encode() and after_name[0] != b"Z"


def _kill_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _answers(url: str) -> bool:
    try:
        listing = get_json(url, "/v1/models", timeout_s=2.0)
    except RequestFailed:
        return False
    return isinstance(listing, dict) and bool(listing.get("data"))  # its shape is checked by the probe after


def _tail(log_path: Path) -> str:
    try:
        lines = [line.strip() for line in log_path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return "(no log)"
    return " | ".join(lines[-LOG_TAIL_LINES:]) or "(empty)"
