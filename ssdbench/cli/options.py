"""Every run setting's command-line option, declared once: `run` takes them as they are, `sweep`
takes the same ones with comma lists (or `--grid`), so every run setting can be swept.

Each option names the RunSettings field it fills; its default is that field's default unless the
CLI's differs (e.g. `--methods ar,sd` as text). Commands get their Typer signatures from this table
(`command_signature`), so an option added here appears in `run`, `sweep` and their --help at once.
"""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Callable, Optional

import typer

from ssdbench.errors import UsageError
from ssdbench.run.settings import SWEEP_FIXED, RunSettings

_UNSET = object()


def split_list(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


@dataclass(frozen=True)
class RunOption:
    field: str  # the RunSettings field it fills
    flag: str  # "--k"; booleans: "--chat-template/--no-chat-template"
    help: str
    kind: type  # int, float, str, bool or Path: the type of one value
    optional: bool = False  # None is a value (not given)
    listed: bool = False  # the value is itself a comma list (--methods ar,sd): never a sweep axis by commas
    cli_default: Any = _UNSET  # the option's default where it differs from the field's
    to_setting: Callable[[Any], Any] = lambda value: value  # the option's value -> the field's
    envvar: str | None = None
    sweep_flags: tuple[str, ...] = ()  # more names for the same option in `sweep` (--batch-sizes)
    sweep_default: Any = _UNSET

    @property
    def default(self) -> Any:
        if self.cli_default is not _UNSET:
            return self.cli_default
        return {f.name: f.default for f in dataclasses.fields(RunSettings)}[self.field]

    @property
    def name(self) -> str:
        """The option's long name without dashes (its first form): `batch-size`."""
        return self.flag.split("/")[0].lstrip("-")


def _all_prompts(value: int | None) -> int | None:
    return value or None  # 0 = every prompt of the suite


RUN_OPTIONS: tuple[RunOption, ...] = (
    RunOption("target", "--target", "Target model: local HF folder, .gguf file, repo id or alias (llama-3.1-70b, "
              "qwen3-0.6b, ...). Default: the embedded SmolLM2-135M-Instruct.", str),
    RunOption("draft", "--draft", "Draft: a model spec like --target, 'self-int8' (int8 copy of the target), "
              "'self-skip:auto' or 'self-skip:3,5,7' (the target with layers skipped) or 'ngram' (prompt lookup, no "
              "model); `ssdbench ls` lists the kinds.", str),
    RunOption("suite", "--suite", "Prompt suite: smoke, humaneval, mtbench, gsm8k, alpaca, ultrafeedback, specbench, "
              "or a .jsonl path.", str),
    RunOption("methods", "--methods", "Comma list of methods, e.g. ar,sd,ssd; `ssdbench ls` lists every registered "
              "method (an unknown name is refused with the closest one).", str, listed=True, cli_default="ar,sd",
              to_setting=split_list),
    RunOption("k", "--k", "Lookahead K: draft tokens proposed per round (at most 32).", int),
    RunOption("temperature", "--temperature", "Target temperature; 0 = greedy.", float, sweep_flags=("--temperatures",)),
    RunOption("draft_temperature", "--draft-temperature", "Draft sampling temperature (default: the target's). "
              "Exact either way.", float, optional=True),
    RunOption("top_p", "--top-p", "Nucleus sampling mass (1 = off).", float),
    RunOption("batch_size", "--batch-size", "Requests decoded together.", int, sweep_flags=("--batch-sizes",),
              sweep_default="1,2,4"),
    RunOption("max_new_tokens", "--max-new-tokens", "New tokens per request at most.", int),
    RunOption("ignore_eos", "--ignore-eos", "Always generate --max-new-tokens (fixed-length benchmarks): EOS is "
              "emitted as an ordinary token and decoding continues, for every method.", bool),
    RunOption("truncate_prompts", "--truncate-prompts", "Prompts longer than the model's context leaves room for: "
              "'none' refuses the run, 'left' keeps each prompt's last tokens (recorded in the manifest).", str),
    RunOption("order", "--order", "interleaved: every method on a prompt (batch) before the next prompt, so load "
              "drift hits all alike; grouped: all of one method, then the next.", str),
    RunOption("num_prompts", "--num-prompts", "Use the first N prompts of the suite (default 8; 0 = all).", int,
              optional=True, to_setting=_all_prompts),
    RunOption("repeats", "--repeats", "Run every prompt R times with distinct seeds.", int),
    RunOption("seed", "--seed", "Base seed; each request's seed derives from it.", int),
    RunOption("device", "--device", "Device for the models: cpu, cuda, cuda:1, ...", str),
    RunOption("dtype", "--dtype", "float32, bfloat16 or float16.", str),
    RunOption("out", "--out", "Run directory (must not exist or be empty). Default: runs/<time>-<id>.", Path,
              optional=True),
    RunOption("engines", "--engine", "Model code: native, hf, or both as 'native,hf' to compare them on the same "
              "prompts.", str, listed=True, cli_default="native", to_setting=split_list),
    RunOption("attention", "--attention", "Attention backend of the native engine: sdpa (reference) or flash.", str),
    RunOption("linear_kernel", "--linear-kernel", "Dense projection kernel of the native engine: auto (probe what "
              "runs and is fastest here, per row count), onednn, gemv or packed_f32 (float32, built for this CPU; "
              "packed_f32 for a verify's few rows) or matmul.", str),
    RunOption("int8_kernel", "--int8-kernel", "int8 draft's projection kernel: auto (probe, per row count) or one "
              "of int8_tiles (AMX), int8_vnni (AVX-512 VNNI / AVX-VNNI / AVX2), int8_dot, int8_gemv, int8_bf16, "
              "int8_fbgemm, int8_onednn, int8pack_mm, int8_dequant; one this CPU cannot run is refused.", str),
    RunOption("tp", "--tp", "Tensor-parallel ranks for the target: ssdbench starts tp-1 more processes itself "
              "(gloo on CPU; NCCL on tp consecutive GPUs from the target's); tp must divide the target's "
              "heads, KV heads and MLP size. Native engine, float32 or bfloat16 weights.", int),
    RunOption("cuda_graphs", "--cuda-graphs", "CUDA graphs for the native engine's repeated steps (decode, "
              "verify): auto (on CUDA), on, or off. Recorded with the kernels.", str),
    RunOption("threads", "--threads", "torch CPU threads (default: torch's choice).", int, optional=True),
    RunOption("data_dir", "--data-dir", "Folder holding file-backed suites (gsm8k/, spec_bench/, alpaca/, "
              "ultrafeedback/).", Path, optional=True, envvar="SSDBENCH_DATA_DIR"),
    RunOption("chat_template", "--chat-template/--no-chat-template", "Wrap prompts in the tokenizer's chat template.",
              bool),
    RunOption("allow_download", "--allow-download", "Let a repo id or alias download from the hub when online.", bool),
    RunOption("target_device", "--target-device", "Where the target runs: cpu:CORES (pinned, e.g. cpu:0) or cuda:N. "
              "Default with ssd on CPU: half the cores.", str, optional=True),
    RunOption("draft_device", "--draft-device", "Where ssd's draft process runs: cpu:CORES or cuda:N. Default with "
              "ssd on CPU: the other half of the cores.", str, optional=True),
    RunOption("sd_draft_device", "--sd-draft-device", "Where sd's draft runs, still in the target's process: a GPU "
              "of its own (cuda:N), e.g. the one ssd's draft process gets, so sd and ssd use the same GPUs. "
              "Default: the target's first GPU. CUDA only; native engine; a draft model of its own weights.", str,
              optional=True),
    RunOption("fan_out", "--fan-out", "ssd branches per accepted count: an integer F (uniform), 'geometric' (needs "
              "--fit-from) or 'auto' (sized to fit inside one verify).", str),
    RunOption("fan_out_list", "--fan-out-list", "ssd fan-out per accepted count 0..K, e.g. 6,3,2,1,1.", str,
              optional=True, listed=True),
    RunOption("fan_out_miss_list", "--fan-out-miss-list", "ssd fan-out for rows that missed last round (default: half "
              "the budget on k=0).", str, optional=True, listed=True),
    RunOption("fit_from", "--fit-from", "A previous run to fit acceptance (and the miss power law) from, for "
              "--fan-out geometric.", Path, optional=True),
    RunOption("backup", "--backup", "ssd proposal on a cache miss: jit (draft now, verifier waits), fast (n-gram / "
              "random, no wait) or auto (per round, from measured costs).", str),
    RunOption("saguaro_c", "--saguaro-c", "Saguaro sampling: scale the draft's top-F tokens by C in (0, 1] when "
              "drafting (1 = off).", float),
    RunOption("timeline", "--timeline/--no-timeline", "With ssd: save timeline.png, a few rounds of verify, draft "
              "glue/tree/backup and waits.", bool, sweep_default=False),
    RunOption("round_timeout_s", "--round-timeout-s", "ssd: fail the run when the draft process, still alive, has not "
              "answered a round within this many seconds (hung).", float),
    RunOption("random_weights", "--random-weights", "Build --target (and a --draft alias) at its published shape "
              "(llama-3.1-70b, llama-3.1-8b, llama-3.2-1b, qwen3-32b, qwen3-0.6b, smollm2-135m) with random weights: "
              "times real shapes with no checkpoint; outputs are not any real model's. Native engine only.", bool),
    RunOption("acceptance", "--acceptance", "How sd and ssd accept drafts: 'exact' (the acceptance rule) or "
              "'synthetic:RATE' (timing aid, e.g. with --random-weights: each drafted token is accepted with "
              "probability RATE in (0, 1], the token after the prefix is still the target's, the cost of a round "
              "is unchanged). 'synthetic:RATE,hit=H' also steers ssd's bonus token onto one its speculation cache "
              "holds with probability H, so its cache hit rate is about H. Outputs are then NOT the target's "
              "(the run says so; compare refuses them beside exact runs). ar is unaffected.", str, listed=True),
    RunOption("trust_remote_code", "--trust-remote-code", "Allow a model folder's own Python code (config.json "
              "auto_map) to run; off by default, recorded in the manifest.", bool),
)
BY_FIELD = {option.field: option for option in RUN_OPTIONS}
Format = Annotated[str, typer.Option("--format", help="table or json.")]


def _typer_option(option: RunOption, *, for_sweep: bool) -> typer.models.OptionInfo:
    flags = (option.flag, *option.sweep_flags) if for_sweep else (option.flag,)
    text = option.help
    if for_sweep and option.field in SWEEP_FIXED:
        text += " One value per sweep: the models and prompts are loaded once."
    elif for_sweep and sweepable(option):
        text += " A comma list makes it an axis of the sweep."
    return typer.Option(*flags, help=text, envvar=option.envvar)


def run_parameter(option: RunOption) -> inspect.Parameter:
    kind = Optional[option.kind] if option.optional else option.kind
    return inspect.Parameter(option.field, inspect.Parameter.KEYWORD_ONLY, default=option.default,
                             annotation=Annotated[kind, _typer_option(option, for_sweep=False)])


def sweepable(option: RunOption) -> bool:
    """Options whose sweep form takes a comma list of values (the others take one value, or go in --grid)."""
    return option.kind in (int, float, str) and not option.listed


def sweep_parameter(option: RunOption) -> inspect.Parameter:
    """In `sweep`, a sweepable option is text: one value, or a comma list of them (an axis of the grid)."""
    default = option.sweep_default if option.sweep_default is not _UNSET else option.default
    if not sweepable(option):
        return run_parameter(option).replace(default=default)
    text_default = None if default is None else str(default)
    return inspect.Parameter(option.field, inspect.Parameter.KEYWORD_ONLY, default=text_default,
                             annotation=Annotated[Optional[str], _typer_option(option, for_sweep=True)])


def command_signature(parameters: list[inspect.Parameter]) -> inspect.Signature:
    return inspect.Signature(parameters)


def settings_from_values(values: dict[str, Any]) -> RunSettings:
    """RunSettings from option values keyed by field (as `run` receives them)."""
    return RunSettings(**{field: BY_FIELD[field].to_setting(value) for field, value in values.items()})


def parse_value(option: RunOption, text: str) -> Any:
    """One value of an option from text (for sweep axes and --grid), converted as its field expects."""
    text = text.strip()
    if option.kind is bool:
        lowered = text.lower()
        if lowered not in ("true", "false", "1", "0", "yes", "no"):
            raise UsageError(f"--{option.name}: expected true or false, got '{text}'")
        value: Any = lowered in ("true", "1", "yes")
    elif option.optional and text.lower() in ("none", ""):
        value = None
    else:
        try:
            value = option.kind(text)
        except ValueError:
            raise UsageError(f"--{option.name} must be a comma list of {option.kind.__name__} values, "
                             f"got '{text}'") from None
    return option.to_setting(value)


def option_named(name: str) -> RunOption:
    """An option by field name or flag name (`batch_size`, `batch-size`, `--batch-size`)."""
    key = name.strip().lstrip("-").replace("-", "_")
    for option in RUN_OPTIONS:
        if key in (option.field, option.name.replace("-", "_")):
            return option
    import difflib

    close = difflib.get_close_matches(key, [o.field for o in RUN_OPTIONS], n=1)
    hint = f"; did you mean '{close[0]}'?" if close else ""
    raise UsageError(f"--grid: '{name}' is not a run setting{hint}")


def alias(field: str):
    """The run option of `field` as an annotation, for commands that take a few of them (validate, ls)."""
    option = BY_FIELD[field]
    kind = Optional[option.kind] if option.optional else option.kind
    return Annotated[kind, _typer_option(option, for_sweep=False)]


Target, Draft, Device, Dtype = alias("target"), alias("draft"), alias("device"), alias("dtype")
TrustRemoteCode, DataDir = alias("trust_remote_code"), alias("data_dir")
TensorParallel = alias("tp")
