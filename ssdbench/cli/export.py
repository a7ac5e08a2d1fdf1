"""`ssdbench export`: a run's answers in another tool's layout (Spec-Bench's model-answer JSONL)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from ssdbench.cli.errors import reports_errors
from ssdbench.cli.options import DataDir
from ssdbench.errors import RunDirectoryError, UsageError

FORMATS = ("specbench",)
RunArg = Annotated[Path, typer.Argument(help="Run directory (from `ssdbench run`).", show_default=False)]
ExportFormat = Annotated[str, typer.Option("--format", help="specbench: one Spec-Bench model-answer JSONL per variant.")]
ExportOut = Annotated[Path, typer.Option("--out", help="Folder for the answer files (created if missing).")]
Overwrite = Annotated[bool, typer.Option("--overwrite", help="Replace answer files already in --out (refused otherwise).")]


@reports_errors
def export_command(run: RunArg, out: ExportOut, format: ExportFormat = "specbench", data_dir: DataDir = None,
                   overwrite: Overwrite = False) -> None:
    from ssdbench.records.reader import load_run
    from ssdbench.report.specbench import answer_records, variant_acceptance

    if format not in FORMATS:
        raise UsageError(f"--format must be one of {', '.join(FORMATS)}, got {format!r}")
    loaded = load_run(run)
    if loaded.requests.empty:
        raise RunDirectoryError(f"{run} has no requests: nothing to export")
    config = loaded.manifest.get("config") or {}
    made_up = variant_acceptance(loaded.steps)
    files = {label: out / _file_name(label, made_up.get(label))
             for label in _labels(loaded.requests)}
    if not overwrite:
        _refuse_existing(list(files.values()))
    records = answer_records(loaded.requests, loaded.steps, categories=_categories(loaded.manifest, data_dir),
                             decode_text=_decoder(config), model_id=Path(str(config.get("target", "model"))).name)
    for label, acceptance in made_up.items():
        typer.echo(f"warning: {label} ran with synthetic acceptance ({acceptance}): its answers are not the target's "
                   "text; marked in the file name, model_id and each record's 'acceptance'", err=True)
    _write({files[label]: rows for label, rows in records.items()}, out)


def _labels(requests) -> list[str]:
    from ssdbench.metrics.summary import add_label

    return list(dict.fromkeys(add_label(requests)["label"]))


def _file_name(label: str, acceptance: str | None) -> str:
    """`sd.jsonl`; a variant timed with synthetic acceptance never takes a real method's file name."""
    name = label.replace("@", "-") + (f"-{acceptance}".replace(":", "-").replace(",", "-") if acceptance else "")
    return f"{name}.jsonl"


def _refuse_existing(paths: list[Path]) -> None:
    existing = [str(path) for path in paths if path.exists() or path.is_symlink()]
    if existing:
        raise UsageError(f"refusing to overwrite answer files already there: {', '.join(existing)}; pass --overwrite "
                         "to replace them, or choose another --out")


def _categories(manifest: dict, data_dir: Path | None) -> dict[str, str]:
    """prompt_id → category: as the run recorded them, or (runs recorded before that) from the suite
    reloaded, refused when its content no longer matches the hash the run recorded."""
    suite_info, config = manifest.get("suite") or {}, manifest.get("config") or {}
    name = str(suite_info.get("name") or config.get("suite"))
    if isinstance(suite_info.get("categories"), dict):
        recorded = suite_info["categories"]
        return {pid: recorded.get(pid) or name for pid in suite_info.get("prompt_ids", [])}
    from ssdbench.suites import load_suite

    folder = data_dir or (Path(config["data_dir"]) if config.get("data_dir") else None)
    suite = load_suite(str(config.get("suite")), data_dir=folder)
    recorded_hash, now = suite_info.get("sha256"), suite.content_hash()
    if recorded_hash != now:
        raise UsageError(f"the suite {suite.name} ({suite.source}) changed since the run (sha256 {str(recorded_hash)[:12]} "
                         f"recorded, {now[:12]} now): its categories cannot be matched to the run's prompts; "
                         "point --data-dir at the suite the run used")
    return {p.prompt_id: p.category or suite.name for p in suite.prompts}


def _decoder(config: dict):
    from ssdbench.models.checkpoint.source import resolve_model
    from ssdbench.models.checkpoint.weights import load_tokenizer

    tokenizer = load_tokenizer(resolve_model(str(config.get("target"))))
    return lambda ids: tokenizer.decode(ids, skip_special_tokens=True)


def _write(answers: dict[Path, list[dict]], out: Path) -> None:
    try:
        out.mkdir(parents=True, exist_ok=True)
        for path, rows in answers.items():
            path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
            typer.echo(f"  {path} ({len(rows)} questions)")
    except OSError as err:
        raise RunDirectoryError(f"cannot write the answers to {out}: {err.strerror or err}") from None
