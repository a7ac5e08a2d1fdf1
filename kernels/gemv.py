"""The `gemv` kernels: gemv.c, compiled on first use for this CPU and called through ctypes.

`GemvLinear` is the float32 dense kernel; models/int8/'s `Int8GemvLinear` calls the int8 one
(`gemv_i8_function`).

Nothing here assumes the compiler or a CPU feature: `gemv_unavailable_reason` says why the
kernel cannot be tried (no C compiler, a failed build, a GPU device, a dtype other than
float32), and the probe then keeps the other candidates. The build is cached per source,
compiler flags and CPU (`the cache root (ssdbench/cache.py): kernels/`), written atomically, so a second
process (ssd's draft) loads what the first built. The library is loaded only after torch so
its OpenMP regions share torch's thread pool instead of starting a second one that would
spin against it on the same cores. Where the build would bring its own OpenMP runtime all
the same (clang's libomp, torch built on Intel's libiomp5), that is detected on loading, the
library is built and loaded once more without OpenMP (serial kernels, idle runtime), and
the model records it (`openmp_fallback`).
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import re
import shutil
import subprocess
from collections.abc import Collection, Iterable
from pathlib import Path

import torch

from ssdbench.cache import cache_file
from ssdbench.profiling.environment import cpu_model

SOURCE = Path(__file__).with_name("gemv.c")
# Built into the same library: packed_f32.c (float32 for a few rows), dot_i8.c (int8 activations), tiles_i8.c
# (AMX tiles), vnni_i8.c (packed int8 for many rows without AMX) and decode_layer.c, which calls the
# projections (gemv.h) and attention.c (decode_layer.h).
SOURCES = (SOURCE, *(Path(__file__).with_name(name) for name in ("packed_f32.c", "dot_i8.c", "tiles_i8.c",
                                                                  "vnni_i8.c", "attention.c", "decode_layer.c")))
HEADERS = tuple(Path(__file__).with_name(name) for name in ("gemv.h", "decode_layer.h", "slot_vec.h", "quant_block.h"))
CFLAGS = ("-O3", "-march=native", "-fopenmp", "-shared", "-fPIC")
SERIAL_CFLAGS = tuple(flag for flag in CFLAGS if flag != "-fopenmp")
OPENMP_RUNTIME = re.compile(r"/lib(gomp|omp|iomp5)\b[^/]*\.so[^/]*$")  # GNU, LLVM and Intel's runtimes
BUILD_TIMEOUT_S = 120


class GemvLinear:
    """y = x . w[o] per output, the weight [out, in] kept as given: CPU, float32, any row count."""

    name = "gemv"

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, *, device, dtype) -> None:
        if (reason := gemv_unavailable_reason(device, dtype)) is not None:
            raise RuntimeError(f"gemv kernel unavailable: {reason}")
        self._fn = library().ssdbench_gemv_f32
        self.w = weight.to(device="cpu", dtype=torch.float32).contiguous()  # [out, in]
        self.bias = None if bias is None else bias.to(dtype=torch.float32).contiguous()  # [out]
        self._bias_ptr = None if self.bias is None else self.bias.data_ptr()
        self._w_ptr = self.w.data_ptr()
        self.out_features, self.in_features = self.w.shape
        self.num_bytes = (weight.numel() + (0 if bias is None else bias.numel())) * 4

    def __call__(self, x: torch.Tensor) -> torch.Tensor:  # [..., in] -> [..., out]
        if x.shape[-1] != self.in_features or x.dtype != torch.float32:
            raise ValueError(f"gemv: a {x.dtype} input of {x.shape[-1]} features for a float32 weight of "
                             f"{self.in_features}")
        x = x.contiguous()
        y = torch.empty(*x.shape[:-1], self.out_features, dtype=torch.float32)  # [..., out]
        self._fn(x.data_ptr(), self._w_ptr, self._bias_ptr, y.data_ptr(), x.numel() // self.in_features,
                 self.in_features, self.out_features, torch.get_num_threads())
        return y

    @property
    def gemv_pointers(self) -> tuple:
        """(weight, scales, bias, in, out) for decode_layer.c: float32, so no scales."""
        return self._w_ptr, None, self._bias_ptr, self.in_features, self.out_features

    def nbytes(self) -> int:
        return self.num_bytes


class PackedF32Linear:
    """y = x . w[o] per output through packed_f32.c: the weight packed once with 16 outputs across each line,
    rows in register tiles sharing each load (a verify's few rows). CPU, float32, any row count."""

    name = "packed_f32"
    kind = 4  # decode_layer.c's projection kind for packed_f32.c

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, *, device, dtype) -> None:
        if (reason := gemv_unavailable_reason(device, dtype)) is not None:
            raise RuntimeError(f"packed_f32 kernel unavailable: {reason}")
        lib = library()
        self._fn = lib.ssdbench_packed_f32
        w = weight.to(device="cpu", dtype=torch.float32).contiguous()  # [out, in]
        self.out_features, self.in_features = w.shape
        self.packed = torch.empty(lib.ssdbench_packed_f32_floats(self.in_features, self.out_features))  # lines
        lib.ssdbench_packed_f32_pack(w.data_ptr(), self.packed.data_ptr(), self.in_features, self.out_features)
        self.bias = None if bias is None else bias.to(dtype=torch.float32).contiguous()  # [out]
        self._bias_ptr = None if self.bias is None else self.bias.data_ptr()
        self.num_bytes = (weight.numel() + (0 if bias is None else bias.numel())) * 4

    def __call__(self, x: torch.Tensor) -> torch.Tensor:  # [..., in] -> [..., out]
        if x.shape[-1] != self.in_features or x.dtype != torch.float32:
            raise ValueError(f"packed_f32: a {x.dtype} input of {x.shape[-1]} features for a float32 weight of "
                             f"{self.in_features}")
        x = x.contiguous()
        y = torch.empty(*x.shape[:-1], self.out_features, dtype=torch.float32)  # [..., out]
        self._fn(x.data_ptr(), self.packed.data_ptr(), self._bias_ptr, y.data_ptr(), x.numel() // self.in_features,
                 self.in_features, self.out_features, torch.get_num_threads())
        return y

    @property
    def gemv_pointers(self) -> tuple:
        """(packed weight, no scales, bias, in, out, kind 4) for decode_layer.c."""
        return self.packed.data_ptr(), None, self._bias_ptr, self.in_features, self.out_features, self.kind

    def nbytes(self) -> int:
        return self.num_bytes


def gemv_unavailable_reason(device, dtype: torch.dtype) -> str | None:
    """Why the gemv kernel cannot be tried here (None: it can)."""
    if torch.device(device).type != "cpu":
        return f"needs a CPU, not {device}"
    if dtype != torch.float32:
        return f"takes float32 only, not {str(dtype).removeprefix('torch.')}"
    return _load()[1]


def gemv_i8_unavailable_reason(device) -> str | None:
    """Why the int8 gemv kernel cannot be tried here (None: it can); it takes any activation dtype."""
    if torch.device(device).type != "cpu":
        return f"needs a CPU, not {device}"
    return _load()[1]


def gemv_i8_function():
    """ssdbench_gemv_i8(x, w_int8, scales, b, y, rows, in, out, threads): float32 x, scales, b and y."""
    return library().ssdbench_gemv_i8


def dot_i8_function():
    """ssdbench_dot_i8(x, w_int8, scales, b, y, rows, in, out, threads): float32 x, scales, b and y; 0 or -1."""
    return library().ssdbench_dot_i8


def tiles_i8_unavailable_reason(device) -> str | None:
    """Why tiles_i8.c's AMX kernel cannot run here (None: it can)."""
    if (reason := gemv_i8_unavailable_reason(device)) is not None:
        return reason
    if not library().ssdbench_tiles_i8_ready():
        return "needs AMX tiles (AMX-INT8, granted by the kernel): this CPU, compiler or OS has none"
    return None


def tiles_i8_functions():
    """tiles_i8.c's (packed_bytes(in, out), pack(w, packed, wsum, in, out), multiply(x, packed, wsum, scales, b, y,
    rows, in, out, threads, use_tiles) -> 0, -1 or -3)."""
    lib = library()
    return lib.ssdbench_tiles_i8_packed_bytes, lib.ssdbench_tiles_i8_pack, lib.ssdbench_tiles_i8


VNNI_PATHS = {3: "avx512-vnni", 2: "avx-vnni", 1: "avx2", 0: "plain loops"}


def vnni_i8_path() -> str:
    """The instruction path vnni_i8.c was built with here (VNNI_PATHS); OSError when the library cannot be had."""
    return VNNI_PATHS[library().ssdbench_vnni_i8_path()]


def vnni_i8_unavailable_reason(device) -> str | None:
    """Why vnni_i8.c's kernel cannot be tried here (None: it can). Without AVX2 it would run its plain loops,
    correct but many times slower than int8_dot: not a candidate then."""
    if (reason := gemv_i8_unavailable_reason(device)) is not None:
        return reason
    if library().ssdbench_vnni_i8_path() == 0:
        return "needs AVX2 at least (AVX-512 VNNI or AVX-VNNI for its fast paths): this CPU or compiler has none"
    return None


def vnni_i8_functions():
    """vnni_i8.c's (packed_bytes(in, out), pack(w, packed, in, out),
    multiply(x, packed, scales, b, y, rows, in, out, threads) -> 0 or -1)."""
    lib = library()
    return lib.ssdbench_vnni_i8_packed_bytes, lib.ssdbench_vnni_i8_pack, lib.ssdbench_vnni_i8


def library_failed(trials: Iterable, kernels: Collection[str]) -> bool:
    """Whether one of `kernels` (those in this library) failed among `trials` because the library could
    not be built or loaded in this process. A choice made without it is not cached: a build that timed
    out on a loaded machine, or a compiler installed later, must not decide this machine's kernels for good."""
    return any(not t.works and t.kernel in kernels for t in trials) and _load()[1] is not None


def library() -> ctypes.CDLL:
    """The built library (gemv.c and decode_layer.c); OSError with the reason when it cannot be had."""
    lib, reason, _ = _load()
    if lib is None:
        raise OSError(reason)
    return lib


def openmp_fallback() -> str | None:
    """Why the library runs serial kernels (a second OpenMP runtime would have run beside torch's), or
    None where it shares torch's runtime or was never loaded."""
    if not _load.cache_info().currsize:
        return None
    return _load()[2]


def openmp_runtimes() -> set[str]:
    """The OpenMP runtime libraries mapped into this process (torch's among them); empty off Linux."""
    try:
        lines = Path("/proc/self/maps").read_text(encoding="utf-8").splitlines()
    except OSError:
        return set()
    paths = {line.split(maxsplit=5)[5] for line in lines if len(line.split(maxsplit=5)) == 6}
    return {os.path.realpath(path) for path in paths if OPENMP_RUNTIME.search(path)}


@functools.cache
def _load() -> tuple[ctypes.CDLL | None, str | None, str | None]:
    """The compiled kernel, built once per machine, or why it cannot be (one line), and why it is the
    serial build if it is; tried once per process."""
    try:
        lib, fallback = _load_sharing_torchs_runtime()
    except OSError as err:
        return None, str(err).strip().splitlines()[0], None
    f32 = lib.ssdbench_gemv_f32  # (x, w, b, y, rows, in, out, threads)
    f32.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_int64] * 3 + [ctypes.c_int32]
    f32.restype = None
    i8 = lib.ssdbench_gemv_i8  # (x, w, scales, b, y, rows, in, out, threads)
    i8.argtypes = [ctypes.c_void_p] * 5 + [ctypes.c_int64] * 3 + [ctypes.c_int32]
    i8.restype = None
    dot = lib.ssdbench_dot_i8  # (x, w, scales, b, y, rows, in, out, threads) -> 0 or -1
    dot.argtypes = [ctypes.c_void_p] * 5 + [ctypes.c_int64] * 3 + [ctypes.c_int32]
    dot.restype = ctypes.c_int
    size = lib.ssdbench_tiles_i8_packed_bytes  # (in, out) -> bytes
    size.argtypes, size.restype = [ctypes.c_int64] * 2, ctypes.c_int64
    pack = lib.ssdbench_tiles_i8_pack  # (w, packed, wsum, in, out)
    pack.argtypes, pack.restype = [ctypes.c_void_p] * 3 + [ctypes.c_int64] * 2, None
    tiles = lib.ssdbench_tiles_i8  # (x, packed, wsum, scales, b, y, rows, in, out, threads, use_tiles) -> 0, -1, -3
    tiles.argtypes, tiles.restype = [ctypes.c_void_p] * 6 + [ctypes.c_int64] * 3 + [ctypes.c_int32] * 2, ctypes.c_int
    lib.ssdbench_tiles_i8_ready.restype = ctypes.c_int
    vnni_bytes = lib.ssdbench_vnni_i8_packed_bytes  # (in, out) -> bytes
    vnni_bytes.argtypes, vnni_bytes.restype = [ctypes.c_int64] * 2, ctypes.c_int64
    vnni_pack = lib.ssdbench_vnni_i8_pack  # (w, packed, in, out)
    vnni_pack.argtypes, vnni_pack.restype = [ctypes.c_void_p] * 2 + [ctypes.c_int64] * 2, None
    vnni = lib.ssdbench_vnni_i8  # (x, packed, scales, b, y, rows, in, out, threads) -> 0 or -1
    vnni.argtypes, vnni.restype = [ctypes.c_void_p] * 5 + [ctypes.c_int64] * 3 + [ctypes.c_int32], ctypes.c_int
    lib.ssdbench_vnni_i8_path.restype = ctypes.c_int
    floats = lib.ssdbench_packed_f32_floats  # (in, out) -> floats
    floats.argtypes, floats.restype = [ctypes.c_int64] * 2, ctypes.c_int64
    f32_pack = lib.ssdbench_packed_f32_pack  # (w, packed, in, out)
    f32_pack.argtypes, f32_pack.restype = [ctypes.c_void_p] * 2 + [ctypes.c_int64] * 2, None
    packed = lib.ssdbench_packed_f32  # (x, packed, b, y, rows, in, out, threads)
    packed.argtypes, packed.restype = [ctypes.c_void_p] * 4 + [ctypes.c_int64] * 3 + [ctypes.c_int32], None
    lib.ssdbench_vnni_i8_peak.argtypes, lib.ssdbench_vnni_i8_peak.restype = [ctypes.c_int64, ctypes.c_int32], ctypes.c_int64
    lib.ssdbench_tiles_i8_peak.argtypes, lib.ssdbench_tiles_i8_peak.restype = [ctypes.c_int64], ctypes.c_int64
    lib.ssdbench_read_f32.argtypes, lib.ssdbench_read_f32.restype = [ctypes.c_void_p, ctypes.c_int64], ctypes.c_float
    lib.ssdbench_f32_peak.argtypes, lib.ssdbench_f32_peak.restype = [ctypes.c_int64, ctypes.c_float], ctypes.c_int64
    layer = lib.ssdbench_decode_layer  # decode_layer.py gives its argument types
    layer.restype = ctypes.c_int
    lib.ssdbench_slot_block.restype = ctypes.c_int
    return lib, None, fallback


def _load_sharing_torchs_runtime() -> tuple[ctypes.CDLL, str | None]:
    """The OpenMP build where it adds no OpenMP runtime to those already loaded (torch's), else the serial
    build, whose kernels never start the added runtime's threads: two runtimes' pools spinning on the
    same cores slow both. Returns the library and, for the serial one, why."""
    before = openmp_runtimes()
    lib = ctypes.CDLL(str(_built_library(CFLAGS)))
    added = sorted(openmp_runtimes() - before)
    if not added or not before:
        return lib, None
    why = f"its OpenMP runtime {added[0]} would run beside torch's {sorted(before)[0]}: serial kernels"
    return ctypes.CDLL(str(_built_library(SERIAL_CFLAGS))), why


def _built_library(flags: tuple[str, ...] = CFLAGS) -> Path:
    compiler = os.environ.get("CC") or "cc"
    if shutil.which(compiler) is None:
        raise OSError(f"no C compiler ({compiler!r} not found; set CC to one)")
    target = cache_file("kernels") / f"gemv-{_build_key(compiler, flags)}.so"
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        done = subprocess.run([compiler, *flags, *map(str, SOURCES), "-o", str(tmp)], capture_output=True, text=True,
                              timeout=BUILD_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise OSError(f"building gemv.c failed: {err}") from err
    if done.returncode != 0:
        first = (done.stderr.strip().splitlines() or ["(no message)"])[0]
        tmp.unlink(missing_ok=True)
        raise OSError(f"building gemv.c with {compiler} failed: {first}")
    os.replace(tmp, target)
    return target


def _build_key(compiler: str, flags: tuple[str, ...]) -> str:
    """Sources, flags, compiler and CPU: a build made for another processor is never loaded here."""
    what = "|".join((sources_digest(), " ".join(flags), compiler, cpu_model(), _cpu_flags()))
    return hashlib.sha256(what.encode()).hexdigest()[:16]


@functools.cache
def sources_digest() -> str:
    """The C sources' and headers' hash: in the probe's cache key too, so a changed kernel is timed afresh."""
    texts = [f.read_text(encoding="utf-8") for f in (*SOURCES, *HEADERS)]
    return hashlib.sha256("|".join(texts).encode()).hexdigest()[:16]


def _cpu_flags() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith(("flags", "Features")):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""
