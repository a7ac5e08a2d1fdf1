"""aiperf, NVIDIA's load generator for OpenAI-compatible servers, installed once into a virtual environment
of its own in ssdbench's cache (`make aiperf`, which `make test` runs), so that `ssdbench serve` can be
measured by a client people already use. Its own environment, because it pins versions of pandas,
transformers and prometheus-client unlike ssdbench's. On a CPU-only machine it installs from the
registry as it is (about 1.2 GB, 80 s measured).

    python -m ssdbench.serve.aiperf_install     # installs where missing, prints the aiperf binary's path
"""

from __future__ import annotations

from pathlib import Path

from ssdbench.cache import cache_file
from ssdbench.cache_venv import create_with, installed_file, installer_main, mark_done

AIPERF_SPEC = "aiperf==0.13.0"


def aiperf_home() -> Path:
    return cache_file("aiperf-" + AIPERF_SPEC.split("==")[1])


def aiperf_binary() -> Path | None:
    """The installed aiperf command, or None where `make aiperf` has not run (or did not finish)."""
    return installed_file(aiperf_home(), "bin/aiperf")


def install() -> Path:
    found = aiperf_binary()
    if found is not None:
        return found
    home = aiperf_home()
    create_with(home, AIPERF_SPEC)
    mark_done(home, AIPERF_SPEC)
    return home / "bin" / "aiperf"


def main(argv: list[str] | None = None) -> int:
    return installer_main(argv, __doc__.split("\n\n")[0], install, AIPERF_SPEC, aiperf_home())


if __name__ == "__main__":
    raise SystemExit(main())
