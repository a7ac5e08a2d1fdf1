"""The settings of one `ssdbench run` as given, checked for range and choice, frozen, recorded in
the manifest. Everything derived from them is resolved once, in plan.py; nothing below the run
layer reads these."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path

from ssdbench.errors import UsageError
from ssdbench.models.drafts import SELF_INT8
from ssdbench.models.memory_plan import MAX_K
from ssdbench.sampling.acceptance_setting import parse_acceptance
from ssdbench.sampling.checks import check_sampling
from ssdbench.speculation.policy import DEFAULT_ROUND_TIMEOUT_S

ENGINES = ("native", "hf")
DTYPES = ("float32", "bfloat16", "float16")
DEFAULT_TARGET = "smollm2-135m"
DEFAULT_DRAFT = SELF_INT8
TRUNCATE_SIDES = ("none", "left")
ORDERS = ("interleaved", "grouped")
BACKUPS = ("jit", "fast", "auto")
CUDA_GRAPH_MODES = ("auto", "on", "off")  # as models/cuda_graphs.py
LINEAR_KERNELS = ("auto", "onednn", "gemv", "packed_f32", "matmul")  # as kernels/linear.py (tests check)
INT8_KERNELS = ("auto", "int8_tiles", "int8_vnni", "int8_dot", "int8_gemv", "int8_bf16", "int8_fbgemm", "int8_onednn",
                "int8pack_mm", "int8_dequant")  # "auto" and models/int8/select.py's candidates (tests check)
# Settings a sweep loads its models and prompts with, once for every point: none of them can be an axis.
SWEEP_FIXED = ("target", "draft", "suite", "data_dir", "num_prompts", "chat_template", "truncate_prompts", "dtype",
               "device", "sd_draft_device", "engines", "attention", "linear_kernel", "int8_kernel", "tp", "threads", "cuda_graphs",
               "seed", "allow_download", "trust_remote_code", "random_weights")


@dataclass(frozen=True)
class RunSettings:
    target: str = DEFAULT_TARGET
    draft: str = DEFAULT_DRAFT
    suite: str = "humaneval"
    methods: tuple[str, ...] = ("ar", "sd")
    k: int = 4
    temperature: float = 0.0
    top_p: float = 1.0
    draft_temperature: float | None = None  # None: the target's
    batch_size: int = 1
    max_new_tokens: int = 64
    ignore_eos: bool = False
    order: str = "interleaved"  # interleaved | grouped (ssdbench.schedule)
    num_prompts: int | None = 8
    repeats: int = 1
    seed: int = 0
    device: str = "cpu"
    dtype: str = "float32"
    engines: tuple[str, ...] = ("native",)
    attention: str = "sdpa"
    linear_kernel: str = "auto"  # the native engine's dense kernel; "auto" probes (kernels/probe.py)
    int8_kernel: str = "auto"  # the int8 draft's kernel; "auto" probes (models/int8/select.py)
    threads: int | None = None
    tp: int = 1  # tensor-parallel ranks of the target (models/tensor_parallel.py)
    cuda_graphs: str = "auto"  # auto | on | off (models/cuda_graphs.py)
    chat_template: bool = True
    data_dir: Path | None = None
    out: Path | None = None
    allow_download: bool = False
    truncate_prompts: str = "none"  # "left": keep each over-long prompt's last tokens (recorded per prompt)
    # SSD (docs/DESIGN.md §5)
    target_device: str | None = None  # None: --device, or one core of two when ssd runs on CPU
    draft_device: str | None = None
    sd_draft_device: str | None = None  # sd's in-process draft on a GPU of its own; None: the target's device
    fan_out: str = "auto"
    fan_out_list: str | None = None
    fan_out_miss_list: str | None = None
    fit_from: Path | None = None
    backup: str = "jit"
    saguaro_c: float = 1.0
    timeline: bool = True  # ssd: draw a few rounds of target and draft on a time line
    round_timeout_s: float = DEFAULT_ROUND_TIMEOUT_S  # ssd: a draft alive but silent this long fails the run
    trust_remote_code: bool = False  # let transformers run Python shipped in a model folder
    random_weights: bool = False  # published shapes (--target/--draft aliases) with random weights, for timing
    acceptance: str = "exact"  # exact | synthetic:RATE[,hit=H] (sampling/synthetic.py): a timing aid, outputs not the target's
    endpoints_only: bool = False  # `run --methods none --endpoint ...`: serving engines only, no method runs

    def __post_init__(self) -> None:
        _check_finite(self)
        _check_positive("--k", self.k)
        if self.k > MAX_K:
            raise UsageError(f"--k {self.k} is above the maximum of {MAX_K} (each draft token costs a sequential "
                             "draft forward; no model pair accepts that many)")
        _check_positive("--batch-size", self.batch_size)
        _check_positive("--max-new-tokens", self.max_new_tokens)
        _check_positive("--repeats", self.repeats)
        if self.num_prompts is not None:
            _check_positive("--num-prompts", self.num_prompts)
        if self.threads is not None:
            _check_positive("--threads", self.threads)
        _check_positive("--tp", self.tp)
        _check_choice("--cuda-graphs", self.cuda_graphs, CUDA_GRAPH_MODES)
        check_sampling(self.temperature, self.top_p, names=("--temperature", "--top-p", "--top-k"))
        if self.draft_temperature is not None:
            check_sampling(self.draft_temperature, self.top_p, names=("--draft-temperature", "--top-p", "--top-k"))
        for engine in self.engines:
            _check_choice("--engine", engine, ENGINES)
        _check_choice("--dtype", self.dtype, DTYPES)
        _check_choice("--linear-kernel", self.linear_kernel, LINEAR_KERNELS)
        _check_choice("--int8-kernel", self.int8_kernel, INT8_KERNELS)
        if not self.methods and not self.endpoints_only:
            raise UsageError("--methods is empty; `ssdbench ls` lists the methods")  # names are checked by the plan
        _check_choice("--backup", self.backup, BACKUPS)
        _check_choice("--truncate-prompts", self.truncate_prompts, TRUNCATE_SIDES)
        _check_choice("--order", self.order, ORDERS)
        if not 0 < self.saguaro_c <= 1:
            raise UsageError(f"--saguaro-c must be in (0, 1], got {self.saguaro_c}")
        if not self.round_timeout_s > 0:
            raise UsageError(f"--round-timeout-s must be > 0 seconds, got {self.round_timeout_s}")
        parse_acceptance(self.acceptance)  # one line for a malformed value or a RATE outside (0, 1]
        if len(set(self.methods)) != len(self.methods):
            raise UsageError(f"--methods lists a method twice: {','.join(self.methods)}")

    def to_dict(self) -> dict:
        return {k: (str(v) if isinstance(v, Path) else v) for k, v in dataclasses.asdict(self).items()}


def _check_finite(config: RunSettings) -> None:
    """inf and nan parse as floats but mean nothing as settings, and would be written into the manifest."""
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        if isinstance(value, float):
            require_finite("--" + field.name.replace("_", "-"), value)


def require_finite(flag: str, value: float) -> float:
    """`value`, or a one-line UsageError for inf / nan."""
    if not math.isfinite(value):
        raise UsageError(f"{flag} must be a finite number, got {value}")
    return value


def _check_positive(flag: str, value: int) -> None:
    if value < 1:
        raise UsageError(f"{flag} must be a positive integer, got {value}")


def _check_choice(flag: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        import difflib

        close = difflib.get_close_matches(value, choices, n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        raise UsageError(f"{flag}: unknown value '{value}'{hint} (choose from {', '.join(choices)})")
