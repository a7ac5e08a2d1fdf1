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


@reports_errors
def export_command(run: RunArg, out: ExportOut, format: ExportFormat = "specbench", data_dir: DataDir = None) -> None:
    from ssdbench.records.reader import load_run
    from ssdbench.report.specbench import answer_records

    if format not in FORMATS:
        raise UsageError(f"--format must be one of {', '.join(FORMATS)}, got {format!r}")
    loaded = load_run(run)
    if loaded.requests.empty:
        raise RunDirectoryError(f"{run} has no requests: nothing to export")
    config = loaded.manifest.get("config") or {}
    records = answer_records(loaded.requests, loaded.steps, categories=_categories(config, data_dir),
                             decode_text=_decoder(config), model_id=Path(str(config.get("target", "model"))).name)
    _write(records, out)


def _categories(config: dict, data_dir: Path | None) -> dict[str, str]:
    """prompt_id → category, from the run's suite (reloaded; the manifest keeps only its hash and ids)."""
    from ssdbench.suites import load_suite

    folder = data_dir or (Path(config["data_dir"]) if config.get("data_dir") else None)
    suite = load_suite(str(config.get("suite")), data_dir=folder)
    return {p.prompt_id: p.category or suite.name for p in suite.prompts}


def _decoder(config: dict):
    from ssdbench.models.source import resolve_model
    from ssdbench.models.weights import load_tokenizer

    tokenizer = load_tokenizer(resolve_model(str(config.get("target"))))
    return lambda ids: tokenizer.decode(ids, skip_special_tokens=True)


def _write(records: dict[str, list[dict]], out: Path) -> None:
    try:
        out.mkdir(parents=True, exist_ok=True)
        for label, rows in records.items():
            path = out / f"{label.replace('@', '-')}.jsonl"
            path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
            typer.echo(f"  {path} ({len(rows)} questions)")
    except OSError as err:
        raise RunDirectoryError(f"cannot write the answers to {out}: {err.strerror or err}") from None
