"""Shared fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch


@pytest.fixture(scope="session")
def tiny(tmp_path_factory) -> Path:
    """A random tiny Llama folder (vocab 64, seed 0) that CLI tests run against; built once per session."""
    from cli_fixtures import save_tiny_model

    return save_tiny_model(tmp_path_factory.mktemp("models") / "tiny", vocab=64, seed=0)


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
