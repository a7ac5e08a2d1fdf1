"""Starting helper processes (ssd's draft process, tensor-parallel ranks) without a signal cutting the start short.

`multiprocessing`'s spawn starts the child and then writes it what to run over a pipe. A SIGTERM,
SIGHUP or Ctrl-C between the two raised in the run (cli/signals.py) before the write, and the
child, reading an empty pipe, printed an `EOFError: Ran out of input` traceback after the run's own
one-line error. So while a start runs, those signals are only noted, and the first one noted is
raised again once the start has returned, to the handlers the run had. (Blocking them with a
signal mask would not do: a signal sent to the process goes to any thread that does not block
it, torch's among them, and Python then runs its handler in the main thread all the same.)
"""

from __future__ import annotations

import signal
import threading

HELD = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def start_uninterrupted(process) -> None:
    """process.start(), with SIGINT, SIGTERM and SIGHUP delivered only after it returns."""
    if threading.current_thread() is not threading.main_thread():  # handlers can only be set from there
        process.start()
        return
    noted: list[int] = []
    previous = {sig: signal.signal(sig, lambda signum, frame: noted.append(signum)) for sig in HELD}
    try:
        process.start()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if noted:
            signal.raise_signal(noted[0])
