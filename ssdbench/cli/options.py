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
    panel: str = ""  # the --help panel it is listed in (PANELS)

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


MODELS, PROMPTS, DECODING, SSD, HARDWARE, OUTPUT = (
    "Models", "Prompts", "Decoding", "SSD", "Hardware and kernels", "Output")
SERVING = "Serving engines"  # endpoint_options' panel
PANELS = (MODELS, PROMPTS, DECODING, SSD, HARDWARE, SERVING, OUTPUT)  # the order --help shows them in

# One line of help each; the detail of every option is in docs/options.md.
RUN_OPTIONS: tuple[RunOption, ...] = (
    RunOption("target", "--target", "Target model: HF folder, .gguf file, repo id or alias (default: the embedded "
              "SmolLM2-135M).", str, panel=MODELS),
    RunOption("draft", "--draft", "Draft: a model like --target, self-int8, self-skip:auto or ngram.", str,
              panel=MODELS),
    RunOption("engines", "--engine", "Model code: native, hf, or native,hf to compare them.", str, listed=True,
              cli_default="native", to_setting=split_list, panel=MODELS),
    RunOption("dtype", "--dtype", "float32, bfloat16 or float16.", str, panel=MODELS),
    RunOption("random_weights", "--random-weights", "Random weights at the alias's published shape (timing only).",
              bool, panel=MODELS),
    RunOption("allow_download", "--allow-download", "Let a repo id or alias download from the hub.", bool,
              panel=MODELS),
    RunOption("trust_remote_code", "--trust-remote-code", "Allow a model folder's own Python code to run.", bool,
              panel=MODELS),
    RunOption("suite", "--suite", "humaneval, mtbench, gsm8k, alpaca, ultrafeedback, specbench, smoke or a .jsonl.",
              str, panel=PROMPTS),
    RunOption("num_prompts", "--num-prompts", "The suite's first N prompts (default 8; 0 = all).", int,
              optional=True, to_setting=_all_prompts, panel=PROMPTS),
    RunOption("repeats", "--repeats", "Run every prompt R times with distinct seeds.", int, panel=PROMPTS),
    RunOption("chat_template", "--chat-template/--no-chat-template", "Wrap prompts in the chat template.", bool,
              panel=PROMPTS),
    RunOption("truncate_prompts", "--truncate-prompts", "Prompts too long for the context: none (refuse) or left.",
              str, panel=PROMPTS),
    RunOption("data_dir", "--data-dir", "Folder of the file-backed suites.", Path, optional=True,
              envvar="SSDBENCH_DATA_DIR", panel=PROMPTS),
    RunOption("methods", "--methods", "Comma list of methods: ar, sd, ssd, ... (`ssdbench ls`).", str, listed=True,
              cli_default="ar,sd", to_setting=split_list, panel=DECODING),
    RunOption("k", "--k", "Lookahead: draft tokens per round (at most 32).", int, panel=DECODING),
    RunOption("temperature", "--temperature", "Target temperature; 0 = greedy.", float,
              sweep_flags=("--temperatures",), panel=DECODING),
    RunOption("draft_temperature", "--draft-temperature", "Draft temperature (default: the target's).", float,
              optional=True, panel=DECODING),
    RunOption("top_p", "--top-p", "Nucleus sampling mass (1 = off).", float, panel=DECODING),
    RunOption("batch_size", "--batch-size", "Requests decoded together.", int, sweep_flags=("--batch-sizes",),
              sweep_default="1,2,4", panel=DECODING),
    RunOption("max_new_tokens", "--max-new-tokens", "New tokens per request at most.", int, panel=DECODING),
    RunOption("ignore_eos", "--ignore-eos", "Always generate --max-new-tokens (EOS is an ordinary token).", bool,
              panel=DECODING),
    RunOption("seed", "--seed", "Base seed; each request's seed derives from it.", int, panel=DECODING),
    RunOption("order", "--order", "interleaved (every method per prompt) or grouped (one method at a time).", str,
              panel=DECODING),
    RunOption("acceptance", "--acceptance", "exact, or synthetic:RATE[,hit=H] for timing (outputs not the "
              "target's).", str, listed=True, panel=DECODING),
    RunOption("fan_out", "--fan-out", "Branches per accepted count: F, geometric or auto.", str, panel=SSD),
    RunOption("fan_out_list", "--fan-out-list", "Fan-out per accepted count 0..K, e.g. 6,3,2,1,1.", str,
              optional=True, listed=True, panel=SSD),
    RunOption("fan_out_miss_list", "--fan-out-miss-list", "Fan-out for rows that missed last round.", str,
              optional=True, listed=True, panel=SSD),
    RunOption("fit_from", "--fit-from", "A run to fit --fan-out geometric from.", Path, optional=True, panel=SSD),
    RunOption("backup", "--backup", "On a cache miss: jit, fast or auto.", str, panel=SSD),
    RunOption("saguaro_c", "--saguaro-c", "Saguaro sampling's C in (0, 1] (1 = off).", float, panel=SSD),
    RunOption("timeline", "--timeline/--no-timeline", "Save timeline.png of a few rounds.", bool,
              sweep_default=False, panel=SSD),
    RunOption("round_timeout_s", "--round-timeout-s", "Fail when the draft process hangs this long.", float,
              panel=SSD),
    RunOption("device", "--device", "cpu, cuda, cuda:1, ...", str, panel=HARDWARE),
    RunOption("target_device", "--target-device", "The target's place: cpu:CORES or cuda:N.", str, optional=True,
              panel=HARDWARE),
    RunOption("draft_device", "--draft-device", "ssd's draft process: cpu:CORES or cuda:N.", str, optional=True,
              panel=HARDWARE),
    RunOption("sd_draft_device", "--sd-draft-device", "sd's draft on a GPU of its own: cuda:N.", str, optional=True,
              panel=HARDWARE),
    RunOption("tp", "--tp", "Tensor-parallel ranks for the target.", int, panel=HARDWARE),
    RunOption("threads", "--threads", "torch CPU threads (default: torch's choice).", int, optional=True,
              panel=HARDWARE),
    RunOption("attention", "--attention", "sdpa or flash.", str, panel=HARDWARE),
    RunOption("linear_kernel", "--linear-kernel", "auto, onednn, gemv, packed_f32 or matmul.", str, panel=HARDWARE),
    RunOption("int8_kernel", "--int8-kernel", "auto or an int8 kernel's name (`ssdbench ls`).", str,
              panel=HARDWARE),
    RunOption("cuda_graphs", "--cuda-graphs", "auto, on or off.", str, panel=HARDWARE),
    RunOption("out", "--out", "Run folder (new or empty; default runs/<time>-<id>).", Path, optional=True,
              panel=OUTPUT),
)
BY_FIELD = {option.field: option for option in RUN_OPTIONS}
Format = Annotated[str, typer.Option("--format", help="table or json.", rich_help_panel=OUTPUT)]
RunFormat = Annotated[str, typer.Option("--format", help="table, json or markdown.", rich_help_panel=OUTPUT)]


def _typer_option(option: RunOption, *, for_sweep: bool) -> typer.models.OptionInfo:
    """In `sweep`, an option that takes a comma list as an axis shows it in its value column (<int,...>);
    the sweep's own help says so once, instead of every option's help."""
    flags = (option.flag, *option.sweep_flags) if for_sweep else (option.flag,)
    is_axis = for_sweep and sweepable(option) and option.field not in SWEEP_FIXED
    metavar = None if not for_sweep or option.kind is bool else f"<{option.kind.__name__}{',...' if is_axis else ''}>"
    return typer.Option(*flags, help=option.help, envvar=option.envvar, metavar=metavar,
                        rich_help_panel=option.panel or None)


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
    """The parameters in the order of their --help panels (Typer lists panels in order of first use)."""
    return inspect.Signature(sorted(parameters, key=_panel_rank))


def _panel_rank(parameter: inspect.Parameter) -> int:
    """A panel outside PANELS (the command's own, e.g. Sweep) comes first."""
    info = next((m for m in getattr(parameter.annotation, "__metadata__", ()) if hasattr(m, "rich_help_panel")), None)
    panel = getattr(info, "rich_help_panel", None)
    return PANELS.index(panel) if panel in PANELS else -1


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
