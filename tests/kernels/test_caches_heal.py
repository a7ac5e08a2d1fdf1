"""Per-machine caches heal instead of crashing: a kernel choice naming a kernel that does not exist
or can no longer be loaded is probed again, a failed build is not cached as the machine's choice, and
a cache folder that cannot be written is one line naming it. Real runs in subprocesses (the gemv
library is loaded once per process), on a tiny model folder."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_fixtures import save_tiny_model

LIBRARY_KERNELS = ("gemv", "int8_gemv", "int8_dot")  # built from our C sources
ENTRY = "from ssdbench.cli.main import main; main()"
TIMEOUT_S = 600


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return save_tiny_model(tmp_path_factory.mktemp("models") / "tiny")


def run(target: Path | None, out: Path, cache: Path, **env: str) -> subprocess.CompletedProcess:
    """`ssdbench run` ar and sd with the int8 self-draft: both a dense and an int8 kernel probe."""
    args = [sys.executable, "-c", ENTRY, "run", "--suite", "smoke", "--num-prompts", "1", "--max-new-tokens", "3",
            "--methods", "ar,sd", "--draft", "self-int8", "--out", str(out)]
    if target is not None:
        args += ["--target", str(target), "--no-chat-template"]
    full_env = {**os.environ, "XDG_CACHE_HOME": str(cache), **env}
    full_env.pop("SSDBENCH_CACHE_DIR", None)
    return subprocess.run(args, env=full_env, capture_output=True, text=True, timeout=TIMEOUT_S)


def choices(cache: Path) -> dict:
    return json.loads((cache / "ssdbench" / "kernels.json").read_text())


def probes(out: Path) -> dict:
    return json.loads((out / "manifest.json").read_text())["kernel_probes"]


def rewrite_choices(cache: Path, kernel: str) -> None:
    """Every cached choice made to name `kernel` for all row counts, as a hand edit would."""
    entries = choices(cache)
    for entry in entries.values():
        entry.update(chosen=kernel, few_rows=kernel, many_rows=kernel, split_rows=1)
    (cache / "ssdbench" / "kernels.json").write_text(json.dumps(entries))


def test_a_cached_choice_naming_an_unknown_kernel_is_probed_again(tiny, tmp_path):
    cache = tmp_path / "cache"
    first = run(tiny, tmp_path / "a", cache)
    assert first.returncode == 0, first.stderr
    rewrite_choices(cache, "evilkernel")
    again = run(tiny, tmp_path / "b", cache)
    assert again.returncode == 0, again.stderr
    healed = choices(cache)
    assert healed and all(e["few_rows"] != "evilkernel" and e["many_rows"] != "evilkernel" for e in healed.values())


def test_a_failed_build_is_not_cached_and_a_cached_choice_it_breaks_falls_back(tiny, tmp_path):
    cache = tmp_path / "cache"
    broken = run(tiny, tmp_path / "a", cache, CC="false")  # `false` as the compiler: every build fails
    assert broken.returncode == 0, broken.stderr
    assert any("building gemv.c" in str(trial) for trial in probes(tmp_path / "a").values())
    kernels_file = cache / "ssdbench" / "kernels.json"
    assert not kernels_file.exists() or not any("building gemv.c" in json.dumps(e) for e in choices(cache).values())

    built = run(tiny, tmp_path / "b", cache)  # a working compiler: gemv is tried again, not ruled out for good
    assert built.returncode == 0, built.stderr
    library_trials = [t for probe in probes(tmp_path / "b").values() for t in probe["trials"]
                      if t["kernel"] in LIBRARY_KERNELS]
    assert {t["kernel"] for t in library_trials} == set(LIBRARY_KERNELS) and all(t["works"] for t in library_trials)

    rewrite_choices(cache, "gemv")  # dense: gemv for every row count (int8 entries: no such int8 kernel)
    fallback = run(tiny, tmp_path / "c", cache, CC="false")
    assert fallback.returncode == 0, fallback.stderr
    assert "gemv" not in json.dumps(json.loads((tmp_path / "c" / "manifest.json").read_text())["kernels"])


def test_a_cache_folder_that_cannot_be_written_is_one_line_naming_it(tmp_path):
    not_a_folder = tmp_path / "afile"
    not_a_folder.write_text("")
    done = run(None, tmp_path / "run", not_a_folder)
    lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
    assert done.returncode == 2, done.stderr
    assert len(lines) == 1 and lines[0].startswith("error: cannot write ssdbench's cache folder"), done.stderr
    assert str(not_a_folder) in lines[0] and "XDG_CACHE_HOME" in lines[0]
