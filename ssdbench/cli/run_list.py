"""The run directories under a folder and what became of each: for `ssdbench ls --runs`."""

from __future__ import annotations

from pathlib import Path

DEFAULT_RUNS_DIR = Path("runs")


def check_runs_folder(folder: Path) -> None:
    """A folder given with --runs exists and is a folder (one line otherwise): an empty listing would
    read as "no runs" when the path was mistyped."""
    from ssdbench.errors import UsageError

    if not folder.exists():
        raise UsageError(f"--runs {folder}: no such folder")
    if not folder.is_dir():
        raise UsageError(f"--runs {folder}: not a folder")


def table_damage(path: Path) -> str | None:
    """Why a run marked complete cannot be read (a table missing, corrupt, or not the one its manifest
    hashed), as compare and report would say it; None when it reads."""
    from ssdbench.errors import RunDirectoryError
    from ssdbench.records.reader import load_run

    try:
        load_run(path)
    except RunDirectoryError as err:
        return str(err)
    return None


def list_runs(folder: Path) -> list[dict]:
    """One entry per run directory directly under `folder` (or in a sweep folder under it), oldest first."""
    from ssdbench.errors import RunDirectoryError
    from ssdbench.records.liveness import describe_running, run_state
    from ssdbench.records.reader import read_manifest
    from ssdbench.records.schema import MANIFEST_NAME

    if not folder.is_dir():
        return []
    entries = []
    for manifest_path in sorted(folder.glob(f"*/{MANIFEST_NAME}")) + sorted(folder.glob(f"*/*/{MANIFEST_NAME}")):
        path = manifest_path.parent
        try:
            manifest = read_manifest(path)
        except RunDirectoryError as err:
            entries.append({"path": str(path), "state": "unreadable", "detail": str(err)})
            continue
        state = run_state(manifest)
        detail = describe_running(manifest) if state in ("running", "died") else manifest.get("reason") or ""
        damage = table_damage(path) if state == "complete" else None
        if damage is not None:
            state, detail = "damaged", damage
        config = manifest.get("config") or {}
        entries.append({"path": str(path), "state": state, "detail": detail,
                        "methods": ",".join(config.get("methods") or []), "started_at": manifest.get("started_at")})
    return sorted(entries, key=lambda e: e.get("started_at") or "")
