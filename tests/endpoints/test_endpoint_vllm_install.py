"""`make vllm`'s installer, without installing: an install counts only once its mark is written, and of the
extras that came with vLLM only the ones that fail to import are removed."""

from __future__ import annotations

import subprocess
import sys

from ssdbench.cache_venv import DONE_MARK
from ssdbench.endpoints.engines import vllm_install


def test_an_install_without_its_mark_is_not_used(tmp_path, monkeypatch):
    monkeypatch.setenv("SSDBENCH_CACHE_DIR", str(tmp_path))
    home = vllm_install.vllm_home()
    assert home.parent == tmp_path and vllm_install.vllm_python() is None
    (home / "bin").mkdir(parents=True)
    (home / "bin" / "python").write_text("")
    assert vllm_install.vllm_python() is None  # interrupted: retried by the next `make vllm`
    (home / DONE_MARK).write_text(vllm_install.VLLM_SPEC)
    assert vllm_install.vllm_python() == home / "bin" / "python"


def test_only_the_extras_that_fail_to_import_are_uninstalled(monkeypatch):
    calls = []
    monkeypatch.setattr(vllm_install, "installed", lambda python, name: name != "torchcodec")
    monkeypatch.setattr(vllm_install, "imports", lambda python, name: name == "torchaudio")
    monkeypatch.setattr(subprocess, "run", lambda args, check: calls.append(args))
    assert vllm_install.drop_broken_extras(sys.executable) == ["torchvision"]
    assert calls == [[sys.executable, "-m", "pip", "uninstall", "--yes", "--quiet", "torchvision"]]
