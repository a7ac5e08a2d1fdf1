"""SIGTERM and SIGHUP end a run the way Ctrl-C does: every `with` unwinds, the draft process is
stopped and the run directory is marked interrupted, instead of the process vanishing mid-write.

`timeout`, `kill`, Slurm and systemd send SIGTERM; a closed terminal or SSH session sends SIGHUP.
"""

from __future__ import annotations

import contextlib
import signal
import threading

HANDLED = (signal.SIGTERM, signal.SIGHUP)


class Terminated(KeyboardInterrupt):
    """Raised in the main thread on SIGTERM/SIGHUP; a KeyboardInterrupt, so it unwinds like Ctrl-C."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum  # what a shell reports for a process ended by this signal


def _raise_once(signum: int, frame) -> None:
    for sig in HANDLED:  # a second signal must not cut short the clean-up the first one started
        signal.signal(sig, signal.SIG_IGN)
    raise Terminated(signum)


@contextlib.contextmanager
def signals_interrupt():
    """Within the block, SIGTERM and SIGHUP raise Terminated; the previous handlers come back after."""
    if threading.current_thread() is not threading.main_thread():  # handlers can only be set from there
        yield
        return
    previous = {sig: signal.getsignal(sig) for sig in HANDLED}
    for sig in HANDLED:
        signal.signal(sig, _raise_once)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
