"""Phase timing for a decode round that adds no synchronisation of its own.

On CPU a mark is a perf_counter read. On CUDA a mark records an event; the events are
resolved once per round, after the round's own sync (reading the verdict back).
"""

from __future__ import annotations

import time

import torch


class PhaseClock:
    """Marks named instants within a round; `elapsed_ms(a, b)` after `resolve()`."""

    def __init__(self, device: torch.device | str) -> None:
        self._device = torch.device(device)
        self._cuda = self._device.type == "cuda"
        self._marks: dict[str, object] = {}
        self.t_start_ns = 0

    def start(self) -> None:
        self._marks.clear()
        self.t_start_ns = time.time_ns()
        self.mark("start")

    def mark(self, name: str) -> None:
        if self._cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record(torch.cuda.current_stream(self._device))  # the model's device, current or not
            self._marks[name] = event
        else:
            self._marks[name] = time.perf_counter_ns()

    def resolve(self) -> None:
        """Wait for the last marked event (CUDA); the round has synced already, so this is free."""
        if self._cuda and self._marks:
            list(self._marks.values())[-1].synchronize()

    def elapsed_ms(self, first: str, last: str) -> float:
        a, b = self._marks[first], self._marks[last]
        if self._cuda:
            return float(a.elapsed_time(b))
        return (b - a) / 1e6
