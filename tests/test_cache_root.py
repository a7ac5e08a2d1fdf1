"""One cache root for everything ssdbench keeps: $SSDBENCH_CACHE_DIR, else $XDG_CACHE_HOME/ssdbench."""

from __future__ import annotations

from pathlib import Path

from ssdbench.cache import cache_root
from ssdbench.endpoints.engines.llama_cpp_build import install_dir
from ssdbench.kernels.probe import default_cache_path as probe_cache
from ssdbench.profiling.bandwidth import default_cache_path as bandwidth_cache


def every_cache() -> list[Path]:
    """The kernel probe's choices, the measured bandwidth and the llama.cpp server build (models converted
    from GGUF go to cache_root() / "models", the built kernels to cache_file("kernels"))."""
    return [probe_cache(), bandwidth_cache(), install_dir()]


def test_ssdbench_cache_dir_holds_every_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("SSDBENCH_CACHE_DIR", str(tmp_path / "mine"))
    assert cache_root() == tmp_path / "mine"
    for path in every_cache():
        assert path.is_relative_to(tmp_path / "mine"), path


def test_without_it_every_cache_is_under_xdg_cache_home(monkeypatch, tmp_path):
    monkeypatch.delenv("SSDBENCH_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    for path in every_cache():
        assert path.is_relative_to(tmp_path / "xdg" / "ssdbench"), path
