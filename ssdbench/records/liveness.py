"""Is the process that wrote a "running" manifest still alive?

A run killed with SIGKILL (or by the kernel's OOM killer, or a power cut) never gets to mark
its manifest; it stays "running". The manifest records which process wrote it, so a reader
on the same host can tell a live run from a dead one: the pid must exist and have started at
the recorded instant (a pid reused by another process does not count), since the same boot.
"""

from __future__ import annotations

import os
import platform


def _boot_id() -> str | None:
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            return f.read().strip()
    except OSError:
        return None


def _stat_fields(pid: int) -> list[str]:
    """Fields 3.. of /proc/PID/stat (state first); empty where there is no such file."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            stat = f.read()
    except OSError:
        return []
    return stat.rsplit(")", 1)[-1].split()  # after "(comm)", which may hold spaces


def _start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (field 22 of /proc/PID/stat)."""
    fields = _stat_fields(pid)
    return int(fields[19]) if len(fields) > 19 else None


def process_identity() -> dict:
    """What identifies this process later, from any process on this host."""
    pid = os.getpid()
    return {"host": platform.node(), "pid": pid, "start_ticks": _start_ticks(pid), "boot_id": _boot_id()}


def is_alive(identity: dict) -> bool | None:
    """True/False for a process of this host; None when it cannot be told (another host, no record)."""
    if not isinstance(identity, dict) or identity.get("host") != platform.node():
        return None
    pid = identity.get("pid")
    if not isinstance(pid, int):
        return None
    if identity.get("boot_id") and _boot_id() and identity["boot_id"] != _boot_id():
        return False  # the machine rebooted since
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        pass
    fields = _stat_fields(pid)
    if fields and fields[0] in ("Z", "X"):  # a zombie: dead, only not yet reaped by its parent
        return False
    recorded = identity.get("start_ticks")
    return recorded is None or _start_ticks(pid) == recorded


def describe_running(manifest: dict) -> str:
    """For a manifest whose status is "running": whether it still is, or which process died."""
    identity = manifest.get("process")
    alive = is_alive(identity)
    if alive is None:
        if isinstance(identity, dict) and identity.get("host"):
            return (f"status 'running' on host {identity['host']} (pid {identity.get('pid')}); "
                    "whether it is still alive cannot be told from this host")
        return "status 'running' (still running, or its process ended before finishing)"
    where = f"pid {identity['pid']} on host {identity['host']}"
    if alive:
        return f"status 'running' ({where} is still running it)"
    return f"died ({where} no longer running; its manifest still says 'running')"


def run_state(manifest: dict) -> str:
    """One word for listings: complete, failed, interrupted, running or died."""
    status = manifest.get("status")
    if status == "running" and is_alive(manifest.get("process")) is False:
        return "died"
    return str(status)
