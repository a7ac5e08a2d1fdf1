"""`ssdbench project`: predicted vs measured speedups on the run's hardware, then other GPUs."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated, Optional

import typer

from ssdbench.cli import options as opt
from ssdbench.cli.errors import reports_errors
from ssdbench.errors import UsageError

RunArg = Annotated[Path, typer.Argument(help="A run directory (from `ssdbench run`).", show_default=False)]
Hardware = Annotated[str, typer.Option("--hardware", help="Comma list of GPUs to project onto: h100, h200, a100, l40s, mi300x, or all.")]
TargetGpus = Annotated[Optional[int], typer.Option("--target-gpus", help="GPUs for the target (tensor parallel). Default: the fewest (power of two) that hold its weights.")]
DraftGpus = Annotated[int, typer.Option("--draft-gpus", help="GPUs for the draft (SSD: its own; SD: shared with the target).")]
TargetShape = Annotated[Optional[str], typer.Option("--target-shape", help="Model shape of the target, e.g. llama-3.1-70b (default: the run's target).")]
DraftShape = Annotated[Optional[str], typer.Option("--draft-shape", help="Model shape of the draft, e.g. llama-3.2-1b (default: the run's draft).")]
Efficiency = Annotated[float, typer.Option("--efficiency", help="Share of datasheet bandwidth and peak FLOP/s reached (0.6 puts Llama-3.1-70B on 4×H100 near the paper's 54.7 tok/s).")]
Context = Annotated[Optional[float], typer.Option("--context", help="KV length per sequence, tokens (default: the run's mean prompt + half its new tokens).")]
HitRate = Annotated[Optional[float], typer.Option("--hit-rate", help="Assume this SSD cache hit rate (default: the run's; without SSD rounds, SSD is projected only when given).")]
FanOut = Annotated[Optional[int], typer.Option("--fan-out", help="SSD branches per sequence (tree width) for projection (default: the run's, else 3·(K+1)).")]
Acceptance = Annotated[str, typer.Option("--acceptance", help="Tokens per round from the fitted per-token acceptance a ('fit'), or measured ('pooled': acceptance per position for the prediction, the pooled acceptance length for the projection).")]

FOOTNOTE = ("Measured: a (fitted per-token acceptance), acceptance length, hit rate, round costs and the measured "
            "speedup, all from the run's records. Modelled: 'predicted' speedups (docs/DESIGN.md §7.5 formulas on costs measured "
            "apart from the rounds they predict: the run's forward-cost calibration and the draft's own events; basis "
            "'accounting check' where those are missing and the variant's own round times stand in) and every time "
            "and rate in the projection table (roofline over datasheet figures × efficiency; "
            "tensor-parallel communication and kernel-launch overheads ignored). Tokens/round there are the run's.")


def _check(efficiency: float, target_gpus, draft_gpus: int, hit_rate, context, fan_out, acceptance: str, format: str) -> None:
    if not 0 < efficiency <= 1:
        raise UsageError(f"--efficiency must be in (0, 1], got {efficiency}")
    for flag, value in (("--target-gpus", target_gpus), ("--draft-gpus", draft_gpus), ("--fan-out", fan_out)):
        if value is not None and value < 1:
            raise UsageError(f"{flag} must be a positive integer, got {value}")
    if hit_rate is not None and not 0 <= hit_rate <= 1:
        raise UsageError(f"--hit-rate must be in [0, 1], got {hit_rate}")
    if context is not None and not math.isfinite(context):
        raise UsageError(f"--context must be a finite number of tokens, got {context}")
    if context is not None and context < 0:
        raise UsageError(f"--context must be >= 0, got {context}")
    if acceptance not in ("fit", "pooled"):
        raise UsageError(f"--acceptance must be 'fit' or 'pooled', got '{acceptance}'")
    if format not in ("table", "json"):
        raise UsageError(f"--format must be 'table' or 'json', got '{format}'")


@reports_errors
def project_command(
    run: RunArg, hardware: Hardware = "all", target_gpus: TargetGpus = None, draft_gpus: DraftGpus = 1,
    target_shape: TargetShape = None, draft_shape: DraftShape = None, efficiency: Efficiency = 0.6,
    context: Context = None, hit_rate: HitRate = None, fan_out: FanOut = None, acceptance: Acceptance = "fit",
    format: opt.Format = "table",
) -> None:
    from ssdbench import projection
    from ssdbench.projection import hardware as hw
    from ssdbench.projection import roofline
    from ssdbench.records.reader import load_run

    _check(efficiency, target_gpus, draft_gpus, hit_rate, context, fan_out, acceptance, format)
    gpus = hw.parse_hardware(hardware)
    loaded = load_run(run)
    measured = projection.measure_run(loaded)
    target, draft = roofline.resolve_models(loaded.manifest, target_shape=target_shape, draft_shape=draft_shape)
    check = projection.check_rows(measured, acceptance=acceptance)
    context = measured.context_tokens if context is None else context
    rows = []
    for gpu in gpus:
        dep = roofline.Deployment(gpu, target_gpus or roofline.gpus_to_fit(target, gpu), draft_gpus, efficiency,
                                  context, measured.batch_size)
        rows += roofline.project(measured, target, draft, dep, acceptance=acceptance, hit_rate=hit_rate, fan_out=fan_out)
    notes = _notes(measured, check, hit_rate)
    models = {"target": _describe(target), "draft": _describe(draft) if draft else "none (n-gram proposer)"}
    if format == "json":
        payload = {"run_dir": str(run), "measured_on": measured.hardware, "acceptance": acceptance,
                   "efficiency": efficiency, "context_tokens": context, "batch_size": measured.batch_size,
                   "models": models, "check": check, "projection": rows, "notes": notes, "footnote": FOOTNOTE}
        typer.echo(json.dumps(_clean(payload)))
        return
    if not measured.variants:  # the tables would be empty: the note says why
        typer.echo(f"note: {notes[0]}")
        return
    _print_tables(measured, check, rows, models, notes, efficiency=efficiency, context=context)


def _describe(model) -> str:
    dtype = "int8" if model.weight_bytes == 1 else "bf16"
    return f"{model.name} ({dtype}, {model.checkpoint_bytes() / 1e9:.3g} GB)"


def _notes(measured, check: list[dict], hit_rate) -> list[str]:
    from ssdbench.projection import GAP_FLAG

    if not measured.variants:  # accepted like any run (docs/runs.md), but no round was timed to model
        return [f"{measured.path} has no recorded rounds (each request ended at its first token): there is "
                "nothing to predict or project"]
    notes = [f"{r['label']}: predicted {r['speedup_predicted']:.2f}× vs measured {r['speedup_measured']:.2f}× "
             f"({r['gap']:+.0%}, beyond ±{GAP_FLAG:.0%}): the model or the timing misses something"
             for r in check if r["is_flagged"]]
    if "ar" not in measured.variants:
        notes.append("no ar rounds in the run: speedups cannot be predicted or measured on its hardware")
    if hit_rate is None and not any(v.hit is not None for v in measured.variants.values()):
        notes.append("no SSD rounds in the run: SSD is not projected (pass --hit-rate to assume one)")
    return notes


def _clean(value):
    """JSON-safe: NaN and infinities become null."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def _num(value, fmt: str = "{:.2f}") -> str:
    return "–" if value is None or (isinstance(value, float) and not math.isfinite(value)) else fmt.format(value)


def _print_tables(measured, check: list[dict], rows: list[dict], models: dict, notes: list[str], *, efficiency: float,
                  context: float) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    if not console.is_terminal and console.width < 200:  # pipes and CI logs: no wrapped headers
        console.width = 200
    first = Table(title=f"On the run's own hardware: {measured.hardware} · batch {measured.batch_size}", title_justify="left")
    for name in ("variant", "K", "a (fit)", "tokens/round (model)", "accept len (measured)", "round / ar (measured)",
                 "hit rate (measured)", "basis", "speedup predicted (model)", "speedup measured", "95% CI", "gap"):
        first.add_column(name, justify="left" if name in ("variant", "basis") else "right")
    for r in check:
        gap = _num(r["gap"], "{:+.0%}") + (" !" if r["is_flagged"] else "")
        first.add_row(r["label"], str(r["k"]), _num(r["a"], "{:.3f}"), _num(r["tokens_per_round_model"]),
                      _num(r["acceptance_length"]), _num(r["round_vs_ar"]), _num(r["hit_rate"], "{:.1%}"),
                      r["basis"], _num(r["speedup_predicted"], "{:.2f}×"), _num(r["speedup_measured"], "{:.2f}×"),
                      f"{_num(r['speedup_low'])}–{_num(r['speedup_high'])}", gap)
    console.print(first)
    console.print(f"Projected onto other hardware (modelled) · target {models['target']} · draft {models['draft']} · "
                  f"efficiency {efficiency:g} · context {context:.0f} tokens · batch {measured.batch_size}")
    second = Table()
    for name in ("hardware", "GPUs target+draft", "variant", "ar ms/token", "round ms", "tokens/round (run)",
                 "tok/s per seq", "speedup vs ar"):
        second.add_column(name, justify="left" if name in ("hardware", "variant") else "right")
    for r in rows:
        second.add_row(r["hardware"], f"{r['target_gpus']}+{r['draft_gpus']}", r["label"], _num(r["ar_ms"], "{:.3g}"),
                       _num(r["round_ms"], "{:.3g}"), _num(r["tokens_per_round"]), _num(r["tokens_per_s"], "{:,.1f}"),
                       _num(r["speedup_vs_ar"], "{:.2f}×"))
    console.print(second)
    for note in notes:
        console.print(f"note: {note}")
    console.print(FOOTNOTE)
