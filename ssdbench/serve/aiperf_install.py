"""aiperf, NVIDIA's load generator for OpenAI-compatible servers, installed once into a virtual environment
of its own in ssdbench's cache (`make aiperf`, which `make test` runs), so that `ssdbench serve` can be
measured by a client people already use. Its own environment, because it pins versions of pandas,
transformers and prometheus-client unlike ssdbench's. On a CPU-only machine it installs from the
registry as it is (about 1.2 GB, 80 s measured).

    python -m ssdbench.serve.aiperf_install     # installs where missing, prints the aiperf binary's path
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import venv
from pathlib import Path

from ssdbench.cache import cache_file

AIPERF_SPEC = "aiperf==0.13.0"
DONE_MARK = ".installed"  # written last: an interrupted install is retried, not used


def aiperf_home() -> Path:
    return cache_file("aiperf-" + AIPERF_SPEC.split("==")[1])


def aiperf_binary() -> Path | None:
    """The installed aiperf command, or None where `make aiperf` has not run (or did not finish)."""
    home = aiperf_home()
    binary = home / "bin" / "aiperf"
    return binary if (home / DONE_MARK).exists() and binary.exists() else None


def install() -> Path:
    home = aiperf_home()
    found = aiperf_binary()
    if found is not None:
        return found
    venv.create(home, with_pip=True, clear=True)
    subprocess.run([str(home / "bin" / "python"), "-m", "pip", "install", "--quiet", AIPERF_SPEC], check=True)
    (home / DONE_MARK).write_text(AIPERF_SPEC + "\n")
    return home / "bin" / "aiperf"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.parse_args(argv)
    try:
        print(install())
    except (subprocess.CalledProcessError, OSError) as err:
        print(f"error: installing {AIPERF_SPEC} into {aiperf_home()} failed: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
