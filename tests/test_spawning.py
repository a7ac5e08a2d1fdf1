"""Helper processes start whole even when a signal arrives meanwhile: the signal is raised once the
start has returned, to the handler the run had."""

from __future__ import annotations

import os
import signal
import time

import pytest

from ssdbench.spawning import start_uninterrupted


class Interrupted(Exception):
    pass


class SignalledMidStart:
    """A stand-in process whose start is signalled half-way, as spawn's was between its two halves."""

    finished = False

    def start(self) -> None:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.05)  # the run's handler would raise here
        self.finished = True


@pytest.fixture
def sigterm_raises():
    def handler(signum, frame):
        raise Interrupted

    previous = signal.signal(signal.SIGTERM, handler)
    yield handler
    signal.signal(signal.SIGTERM, previous)


def test_a_signal_during_a_start_is_raised_once_the_start_returns(sigterm_raises):
    process = SignalledMidStart()
    with pytest.raises(Interrupted):
        start_uninterrupted(process)
    assert process.finished
    assert signal.getsignal(signal.SIGTERM) is sigterm_raises  # the run's handler is back

    unheld = SignalledMidStart()
    with pytest.raises(Interrupted):
        unheld.start()  # what happened before: cut short half-way
    assert not unheld.finished


def test_a_start_without_a_signal_raises_nothing(sigterm_raises):
    class Quiet:
        started = False

        def start(self) -> None:
            self.started = True

    process = Quiet()
    start_uninterrupted(process)
    assert process.started and signal.getsignal(signal.SIGTERM) is sigterm_raises
