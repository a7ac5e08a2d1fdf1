"""Shared fixtures."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture
def one_thread():
    """Run a test's tiny-model forwards on one thread, then restore the count.

    Tiny models gain nothing from threads, and on a shared, loaded machine OpenMP threads
    contending for cores made the many-sample tests tens of times slower.
    """
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
