"""Where a role runs: a torch device, and on CPU optionally the cores it is pinned to.

`cpu:0` pins to core 0 (one thread), `cpu:2-3` or `cpu:2,3` to those cores, `cpu` leaves
the process where the OS puts it; `cuda`, `cuda:1` name a GPU.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass

import torch

from ssdbench.errors import UsageError
from ssdbench.profiling.devices import check_device


@dataclass(frozen=True)
class Placement:
    spec: str
    device: str  # what torch sees: "cpu", "cuda:1"
    cores: tuple[int, ...] | None  # CPU cores to pin to; None = no pinning

    @property
    def threads(self) -> int | None:
        return len(self.cores) if self.cores else None

    def describe(self) -> dict:
        return {"spec": self.spec, "device": self.device, "cores": list(self.cores) if self.cores else None,
                "threads": self.threads or torch.get_num_threads()}


def parse_placement(spec: str, *, flag: str) -> Placement:
    kind, colon, rest = spec.partition(":")
    if kind == "cuda":
        check_device(spec, flag=flag)
        return Placement(spec, spec, None)
    if kind != "cpu":
        raise UsageError(f"{flag}: expected cpu, cpu:CORES or cuda[:N], got '{spec}'")
    if not colon:
        return Placement(spec, "cpu", None)
    if not rest.strip():  # "cpu:" would silently mean "unpinned"; say which was meant
        raise UsageError(f"{flag} '{spec}' names no cores; use cpu (unpinned) or cpu:CORES (e.g. cpu:0-3)")
    available = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
    cores = _parse_cores(rest, flag=flag, spec=spec, available=available)
    return Placement(spec, "cpu", cores)


def check_disjoint(target: Placement, draft: Placement, *, given: tuple[bool, bool] = (True, True)) -> None:
    """ssd's two processes pinned to shared cores would contend for them and time each other's work.

    `given`: whether the user typed each placement (else it is the default, and the message says so).
    """
    shared = sorted(set(target.cores or ()) & set(draft.cores or ()))
    if shared:
        names = [f"--{role}-device {p.spec}" + ("" if typed else " (the default)")
                 for role, p, typed in (("target", target, given[0]), ("draft", draft, given[1]))]
        raise UsageError(f"{names[0]} and {names[1]} share core(s) {_span(shared)}: ssd runs target and draft "
                         "concurrently, each on its own cores")


def _parse_cores(text: str, *, flag: str, spec: str, available: list[int]) -> tuple[int, ...]:
    cores: list[int] = []
    for part in text.split(","):
        low, high = _parse_range(part, flag=flag, spec=spec)
        ends = sorted({c for c in (low, high) if c not in available})  # before expanding: cpu:0-100000000
        missing = ends or [c for c in range(low, high + 1) if c not in available]
        if missing:
            raise UsageError(f"{flag} {spec}: {_cores_are(missing)} not available here (available: {_span(available)})")
        cores.extend(range(low, high + 1))
    return tuple(sorted(set(cores)))


def _parse_range(part: str, *, flag: str, spec: str) -> tuple[int, int]:
    """`3` or `2-5` as (low, high); a reversed or malformed range is a UsageError."""
    low, _, high = part.partition("-")
    try:
        first, last = int(low), int(high or low)
    except ValueError:
        raise UsageError(f"{flag}: bad core list in '{spec}' (use e.g. cpu:0, cpu:0-3, cpu:0,2)") from None
    if last < first:
        raise UsageError(f"{flag}: reversed core range '{part}' in '{spec}' (use low-high, e.g. cpu:0-3)")
    return first, last


def pin_current_process(placement: Placement) -> None:
    """Pin every thread of this process to the placement's cores and match torch's thread count.

    Linux applies affinity per thread, and a thread pool started before pinning (OpenMP's)
    would keep the old mask; so set it on each thread, after torch has set its threads up.
    """
    if placement.cores and hasattr(os, "sched_setaffinity"):
        torch.set_num_threads(len(placement.cores))
        _set_affinity_all_threads(placement.cores)


def _set_affinity_all_threads(cores) -> None:
    try:
        threads = [int(tid) for tid in os.listdir("/proc/self/task")]
    except OSError:
        threads = [0]
    for tid in threads:
        try:
            os.sched_setaffinity(tid, cores)
        except OSError:  # a thread that ended meanwhile
            pass


@contextlib.contextmanager
def pinned(placement: Placement | None):
    """Run a block pinned to `placement`, then restore the previous affinity and thread count."""
    if placement is None or not placement.cores or not hasattr(os, "sched_getaffinity"):
        yield
        return
    before, threads = os.sched_getaffinity(0), torch.get_num_threads()
    pin_current_process(placement)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        _set_affinity_all_threads(before)


def default_placements(num_roles: int = 2) -> tuple[str, str]:
    """Target and draft placements for ssd: the first half of this process's cores for the target, the
    rest for the draft (one core each on a 2-core machine); with fewer than two cores, both share them."""
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else [0]
    if len(cores) >= num_roles:
        half = len(cores) // 2
        target, draft = cores[:half], cores[half:]
        return f"cpu:{_span(target)}", f"cpu:{_span(draft)}"
    return "cpu", "cpu"


def _cores_are(cores: list[int]) -> str:
    """`core 9 is`, `cores 9,12 are`."""
    return f"core {cores[0]} is" if len(cores) == 1 else f"cores {_span(cores)} are"


def _span(cores: list[int]) -> str:
    return ",".join(str(c) for c in cores)
