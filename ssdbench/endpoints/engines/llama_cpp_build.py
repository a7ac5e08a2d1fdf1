"""Build llama.cpp's `llama-server` (and `llama-quantize`) once into the user's cache, for tests and
for benchmarking a real serving engine on this machine.

The sources come from a package registry: the MIT-licensed `llama-cpp-python` source distribution
vendors llama.cpp, server included. Only the two targets are built, on the CPU, with no curl and no
OpenSSL (nothing here fetches models over the network), with `-j` jobs. The result lives in

    <cache root>/llama-server/<llama-cpp-python version>/   (ssdbench/cache.py)
        bin/llama-server, bin/llama-quantize, build.json (what was built, how long it took)
        models/target.gguf, the embedded SmolLM2 GGUF (Q4_1); models/draft-Q4_0.gguf, a requantised copy

and is reused while `build.json` is there. Run as `python -m ssdbench.endpoints.engines.llama_cpp_build`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

SOURCE_PACKAGE = "llama-cpp-python"
SOURCE_VERSION = "0.3.36"  # pinned: a new version is a new cache folder, built anew
TARGETS = ("llama-server", "llama-quantize")
DRAFT_TYPE = "Q4_0"  # the draft: the embedded Q4_1 model requantised (cheaper per token, close in output)
NO_AMX = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
CMAKE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release", "-DGGML_NATIVE=ON", "-DLLAMA_CURL=OFF", "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF", "-DBUILD_SHARED_LIBS=OFF", "-DGGML_OPENMP=OFF",
    # -march=native turns on AMX where the CPU lists it, and ggml's AMX matmul then crashed the server at its
    # first forward (SIGSEGV in ggml_backend_amx_mul_mat) on the Xeon dev machines; AVX-512 is kept.
    f"-DCMAKE_C_FLAGS={NO_AMX}", f"-DCMAKE_CXX_FLAGS={NO_AMX}",
)
RECORD = "build.json"


class BuildError(RuntimeError):
    """A step of the build failed; the message names it and where its log is."""


def install_dir(cache_root: Path | None = None, version: str = SOURCE_VERSION) -> Path:
    from ssdbench import cache  # a module: the parameter has the function's name

    return cache.cache_root(cache_root) / "llama-server" / version


def server_binary(cache_root: Path | None = None) -> Path | None:
    """The built `llama-server`, or None when the build has not been done (its record is written last)."""
    folder = install_dir(cache_root)
    binary = folder / "bin" / "llama-server"
    return binary if (folder / RECORD).is_file() and binary.is_file() else None


def model_paths(cache_root: Path | None = None) -> tuple[Path, Path]:
    """(target GGUF, draft GGUF) for the built server."""
    models = install_dir(cache_root) / "models"
    return models / "target.gguf", models / f"draft-{DRAFT_TYPE}.gguf"


def build(cache_root: Path | None = None, *, jobs: int = 2, log=print) -> Path:
    """Build once; return the install folder. Reuses a finished build."""
    folder = install_dir(cache_root)
    if (folder / RECORD).is_file():
        log(f"llama-server already built in {folder}")
        return folder
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="ssdbench-llama-build-") as work:
        source = _fetch_sources(Path(work))
        build_dir = Path(work) / "build"
        _run(["cmake", "-S", str(source), "-B", str(build_dir), *CMAKE_FLAGS], Path(work) / "configure.log", log)
        _run(["cmake", "--build", str(build_dir), "--target", *TARGETS, f"-j{jobs}"], Path(work) / "build.log", log)
        staging = folder.with_name(folder.name + f".tmp{os.getpid()}")
        shutil.rmtree(staging, ignore_errors=True)
        (staging / "bin").mkdir(parents=True)
        for target in TARGETS:
            shutil.copy2(build_dir / "bin" / target, staging / "bin" / target)
        compile_s = time.monotonic() - started
        _make_models(staging, log)
        record = {"source": f"{SOURCE_PACKAGE}=={SOURCE_VERSION} (sdist, vendored llama.cpp)",
                  "cmake_flags": list(CMAKE_FLAGS), "targets": list(TARGETS), "jobs": jobs,
                  "build_s": round(compile_s, 1), "total_s": round(time.monotonic() - started, 1)}
        (staging / RECORD).write_text(json.dumps(record, indent=1))
        shutil.rmtree(folder, ignore_errors=True)
        folder.parent.mkdir(parents=True, exist_ok=True)
        os.replace(staging, folder)
    log(f"llama-server built in {folder} ({record['total_s']:.0f} s)")
    return folder


def _fetch_sources(work: Path) -> Path:
    """Download the source distribution with pip (the registry's ordinary client) and unpack it."""
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-binary", ":all:", "--no-deps",
                    "-d", str(work), f"{SOURCE_PACKAGE}=={SOURCE_VERSION}"],
                   check=True, stdout=subprocess.DEVNULL)
    archive = next(work.glob(f"{SOURCE_PACKAGE.replace('-', '_')}-{SOURCE_VERSION}.tar.gz"))
    with tarfile.open(archive) as tar:
        members = [m for m in tar.getmembers() if "/vendor/llama.cpp/" in m.name]
        tar.extractall(work, members=members, filter="data")
    return work / archive.name.removesuffix(".tar.gz") / "vendor" / "llama.cpp"


def _make_models(folder: Path, log) -> None:
    """The embedded SmolLM2 GGUF as the target (a copy: the cache outlives the virtual environment it came
    from) and a requantised copy as draft."""
    from ssdbench.models.checkpoint.embedded import embedded_gguf_path

    models = folder / "models"
    models.mkdir()
    target = models / "target.gguf"
    shutil.copyfile(embedded_gguf_path(), target)
    draft = models / f"draft-{DRAFT_TYPE}.gguf"
    _run([str(folder / "bin" / "llama-quantize"), "--allow-requantize", str(target), str(draft), DRAFT_TYPE],
         folder / "quantize.log", log)


def _run(command: list[str], log_file: Path, log) -> None:
    log(f"$ {' '.join(command)}")
    with open(log_file, "w") as out:
        done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        tail = log_file.read_text(errors="replace").splitlines()[-15:]
        raise BuildError(f"{command[0]} failed (exit {done.returncode}); last lines of {log_file}:\n" + "\n".join(tail))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", "-j", type=int, default=2)
    args = parser.parse_args(argv)
    try:
        build(jobs=args.jobs)
    except (BuildError, subprocess.CalledProcessError, OSError) as err:
        print(f"error: building llama-server: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
