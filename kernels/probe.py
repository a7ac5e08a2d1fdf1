"""Choosing dense kernels by trying them: what runs here, and what is fastest for the shapes at hand.

No kernel is assumed to work from the CPU's name: oneDNN's packed bf16 path needs AVX-512
(or AVX-NE-CONVERT) and raises elsewhere; its packed fp32 path is fast for several rows
but, on some CPUs, several times slower than `x @ w_t` for one row. So each candidate is
first run once on a tiny input and checked against a float64 reference (it must work and
be right), then timed on the model's own projection shapes at one row (a decode step) and
at several rows (a verify, a batch, a tree step), the candidates taking turns over 15 rounds
so a burst of other work on the machine slows them all alike. The cheapest kernel for each row count
wins; when one kernel wins for one row and another for many, the linear keeps the weight
in both layouts and dispatches on the row count (twice the dense weights' memory, so only
where the caller allows it).

Timings are noisy on a loaded machine, so a choice is cached per host, CPU, thread count,
dtype and shapes (`the cache root (ssdbench/cache.py): kernels.json`): runs on one machine use the
same kernels and stay comparable. The trials are recorded in the run manifest.
"""

from __future__ import annotations

import platform
import statistics
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from ssdbench.errors import error_line
from ssdbench.cache import cache_file
from ssdbench.kernels.gemv import sources_digest
from ssdbench.machine_cache import read_entries, write_entry
from ssdbench.profiling.environment import cpu_model

TINY_IN, TINY_OUT, TINY_ROWS = 64, 48, 3
# A decode step up to a verify of K+1 = 8 rows (oneDNN's packing is tuned for ~8), and 32 for a
# prefill: a row-streaming kernel that wins at one row can be several times slower on a
# prompt (int8 gemv made the draft's prefill of 140 tokens take ~1 s), so prefills must
# go to whichever kernel wins with many rows.
PROBE_ROWS = (1, 2, 4, 8, 16, 32, 128)  # 16: ssd's tree step of 16 branches
MAX_PROBE_ELEMENTS = 8 * 2**20  # a larger projection is timed at a shape capped to this many weights
PROBE_VERSION = "probe8"  # in the cache key: choices an earlier probe made are not reused
PROBE_ROUNDS = 15  # interleaved rounds of timing per candidate and row count
CLOSE_ENOUGH = 1.10  # within 10% of the fastest counts as a tie, resolved by the candidates' order
# A fused step (decode_layer.c) skips ~20 tensor operations per layer launched from Python, which
# timing the linears alone does not see: SmolLM2-135M's int8 draft, one Intel Xeon core
# (benchmarks/step_costs.py), 20.2 ms fused against 25.7 on the Python path at one row, and at 2-4
# rows the fused int8_dot step beat the Python path's faster GEMM kernels. So a fused kernel's
# times count this much less when kernels are chosen for a model that fuses.
FUSED_CREDIT = 1.2


@dataclass(frozen=True)
class KernelTrial:
    """One candidate's result: whether it ran correctly, and its median ms per call at each row count."""

    kernel: str
    works: bool
    reason: str = ""
    ms_by_rows: tuple[tuple[int, float], ...] = ()

    def ms(self, rows: int) -> float:
        return dict(self.ms_by_rows)[rows]


@dataclass(frozen=True)
class DenseChoice:
    """The kernel for calls of fewer than `split_rows` rows, the kernel for the rest, and the evidence."""

    few: str
    many: str
    split_rows: int
    trials: tuple[KernelTrial, ...]

    @property
    def name(self) -> str:
        return self.few if self.few == self.many else f"{self.few}<{self.split_rows}rows<={self.many}"

    def describe(self) -> dict:
        return {"chosen": self.name, "few_rows": self.few, "many_rows": self.many, "split_rows": self.split_rows,
                "trials": [asdict(t) for t in self.trials]}


Factory = Callable[[torch.Tensor, torch.Tensor | None], Callable[[torch.Tensor], torch.Tensor]]


def check_kernel(name: str, make: Factory, *, device, dtype: torch.dtype, tolerance: float | None = None) -> KernelTrial:
    """Run `make`'s linear once on a tiny input; it works if it runs and matches a float64 reference
    within `tolerance` of the largest output (default: by dtype; an int8 kernel passes its own)."""
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(TINY_OUT, TINY_IN, generator=gen)  # [out, in]
    b = torch.randn(TINY_OUT, generator=gen)  # [out]
    x = torch.randn(1, TINY_ROWS, TINY_IN, generator=gen)  # [1, rows, in]
    want = torch.nn.functional.linear(x.double(), w.double(), b.double())  # [1, rows, out]
    try:
        got = make(w, b)(x.to(device=device, dtype=dtype)).double().cpu()
    except (RuntimeError, NotImplementedError, TypeError, ValueError) as err:
        return KernelTrial(name, works=False, reason=error_line(err))
    if tolerance is None:
        tolerance = 0.05 if dtype in (torch.bfloat16, torch.float16) else 1e-3
    error = float(((got - want).abs().max() / want.abs().max()))
    if not error <= tolerance:
        return KernelTrial(name, works=False, reason=f"wrong result: max relative error {error:.3g}")
    return KernelTrial(name, works=True)


def time_kernels(candidates: Sequence[tuple[KernelTrial, Factory]], shapes: Sequence[tuple[int, int]], *, device,
                 dtype: torch.dtype, rows: Iterable[int] = PROBE_ROWS,
                 rounds: int = PROBE_ROUNDS) -> list[KernelTrial]:
    """Median ms for one call over every shape (in_features, out_features), per candidate and row count.

    The candidates take turns, one call each per round, for `rounds` rounds: on a shared machine a
    burst of someone else's work then slows every candidate's samples alike, where timing one
    candidate after another once let a single burst decide a choice that is cached for good.
    """
    rows = tuple(rows)
    gen = torch.Generator().manual_seed(1)
    weights = [torch.randn(o, i, generator=gen) for i, o in _capped(shapes)]  # [out, in] each, shared
    inputs = {r: [torch.randn(1, r, i, generator=gen).to(device=device, dtype=dtype) for i, _ in _capped(shapes)]
              for r in rows}
    built = [[make(w, None) for w in weights] for _, make in candidates]
    sync = (lambda: torch.cuda.synchronize(device)) if torch.device(device).type == "cuda" else (lambda: None)
    samples: list[dict[int, list[float]]] = [{r: [] for r in rows} for _ in candidates]
    for round_index in range(rounds + 1):  # round 0 warms up: first calls pay one-off set-up
        for linears, times in zip(built, samples):
            for r in rows:
                start = time.perf_counter()
                for f, x in zip(linears, inputs[r]):
                    f(x)
                sync()
                if round_index:
                    times[r].append((time.perf_counter() - start) * 1e3)
    return [KernelTrial(trial.kernel, works=True, ms_by_rows=tuple((r, statistics.median(t[r])) for r in rows))
            for (trial, _), t in zip(candidates, samples)]


def time_and_choose(trials: Sequence[KernelTrial], factory: Callable[[str], Factory],
                    shapes: Sequence[tuple[int, int]], *, device, dtype: torch.dtype,
                    fused_kernels: Collection[str] | None = None) -> DenseChoice:
    """`choose` among `trials` after timing the working ones, when there is more than one to compare;
    factory(name) makes a candidate's linears."""
    if sum(t.works for t in trials) > 1:
        working = [(t, factory(t.kernel)) for t in trials if t.works]
        timed = iter(time_kernels(working, shapes, device=device, dtype=dtype))
        trials = [next(timed) if t.works else t for t in trials]
    return choose(trials, fused_kernels=fused_kernels)


def choose(trials: Sequence[KernelTrial], *, fused_kernels: Collection[str] | None = None) -> DenseChoice:
    """One kernel, or one for calls of few rows and another for the rest: whichever assignment of the
    probed row counts comes closest to the fastest kernel at every one of them.

    The rows compared are those every working trial was timed at. Each assignment (a kernel for all
    rows, or a few-rows kernel up to a probed count and a many-rows kernel above it) is scored by its
    worst ratio to the fastest time at any probed count; among those within CLOSE_ENOUGH of the best
    score, one kernel beats two, then the earlier candidates win. Between probed counts the split
    sits just above the last count the few-rows kernel serves (a row-streaming kernel's cost grows with
    the rows, a GEMM's hardly). Judging by the single winner at one row and at the most rows once
    sent every call of 2 to 127 rows to a kernel 4x slower there, where a third kernel tied at 2 rows.
    `fused_kernels`, when given, are the kernels the fused step (decode_layer.c) runs: only they may
    serve one row, and their times count FUSED_CREDIT less, for the Python work a fused step saves.
    """
    working = [t for t in trials if t.works]
    if not working:
        reasons = "; ".join(f"{t.kernel}: {t.reason}" for t in trials)
        raise RuntimeError(f"no dense linear kernel works here ({reasons})")
    if not all(t.ms_by_rows for t in working):  # untimed (a single candidate): nothing to choose
        return DenseChoice(working[0].kernel, working[0].kernel, 1, tuple(trials))
    if fused_kernels is not None:
        working = [_credited(t) if t.kernel in fused_kernels else t for t in working]
    rows = sorted(set.intersection(*(set(dict(t.ms_by_rows)) for t in working)))
    best = {r: min(t.ms(r) for t in working) for r in rows}
    scored = []  # (ratios per row count, kernels used, candidate order, choice)
    for f, few in enumerate(working):
        if fused_kernels is not None and few.kernel not in fused_kernels:
            continue
        whole = tuple(few.ms(r) / best[r] for r in rows)
        scored.append((whole, 1, (f, f), DenseChoice(few.kernel, few.kernel, 1, tuple(trials))))
        for m, many in enumerate(working):
            if m == f:
                continue
            for cut in range(1, len(rows)):  # rows[:cut] to `few`, the rest to `many`
                ratios = tuple((few if i < cut else many).ms(r) / best[r] for i, r in enumerate(rows))
                scored.append((ratios, 2, (f, m), DenseChoice(few.kernel, many.kernel, rows[cut - 1] + 1, tuple(trials))))
    leader = min(scored, key=lambda entry: (max(entry[0]), entry[1], entry[2]))[0]
    close = [entry for entry in scored if _close_to(entry[0], leader)]
    return min(close, key=lambda entry: (entry[1], entry[2]))[3]


def _close_to(ratios: tuple[float, ...], leader: tuple[float, ...]) -> bool:
    """Within CLOSE_ENOUGH of the least-worst assignment at every probed row count. Judged on the worst
    ratio alone, a 15% gap at 128 rows that every assignment shares let a kernel 24% slower at one row
    tie for the one-row calls (a Xeon's fp32 target: gemv 4.5 ms against matmul's 3.7)."""
    return all(r <= max(l, 1.0) * CLOSE_ENOUGH for r, l in zip(ratios, leader))


def _credited(trial: KernelTrial) -> KernelTrial:
    """A fused kernel's times as a whole step sees them: less the Python work fusing saves."""
    return KernelTrial(trial.kernel, trial.works, trial.reason,
                       tuple((r, ms / FUSED_CREDIT) for r, ms in trial.ms_by_rows))


def _capped(shapes: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """Shapes scaled down (out first) to at most MAX_PROBE_ELEMENTS weights, so a 70B probe stays cheap."""
    return [(i, max(1, min(o, MAX_PROBE_ELEMENTS // i))) for i, o in shapes]


# ---- the per-machine cache of choices ----

def default_cache_path() -> Path:
    return cache_file("kernels.json")


def cache_key(device, dtype: torch.dtype, shapes: Sequence[tuple[int, int]], candidates: Sequence[str]) -> str:
    """Host, processor, threads, dtype, shapes, candidates and our C kernels' sources: what a choice depends on
    (a choice made before a kernel changed would keep the kernel's old speed)."""
    dev = torch.device(device)
    what = torch.cuda.get_device_name(dev) if dev.type == "cuda" else f"{cpu_model()}|threads={torch.get_num_threads()}"
    return (f"{PROBE_VERSION}|{platform.node()}|{dev.type}|{what}|{dtype}|{list(shapes)}|{','.join(candidates)}"
            f"|c={sources_digest()}")


def read_cached(path: Path, key: str, *, usable: Callable[[str], bool] = lambda kernel: True) -> DenseChoice | None:
    """The cached choice for `key`, or None (probe again) when there is none, it is damaged, or it names
    a kernel that is not `usable` here now: a name no candidate has (a hand-edited or foreign cache), or
    one whose library can no longer be built or loaded. A new probe's choice then replaces the entry."""
    try:
        entry = read_entries(path)[key]
        trials = tuple(KernelTrial(t["kernel"], t["works"], t["reason"], tuple(map(tuple, t["ms_by_rows"])))
                       for t in entry["trials"])
        choice = DenseChoice(entry["few_rows"], entry["many_rows"], int(entry["split_rows"]), trials)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not (isinstance(choice.few, str) and isinstance(choice.many, str) and usable(choice.few)
            and usable(choice.many)):
        return None
    return choice


def write_cached(path: Path, key: str, choice: DenseChoice) -> None:
    """Best effort, atomically: a cache that cannot be written only costs a new probe."""
    write_entry(path, key, choice.describe())
