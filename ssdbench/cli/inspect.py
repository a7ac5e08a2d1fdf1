"""`ssdbench ls` (what this machine offers) and `ssdbench validate` (would this pair run here?)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from ssdbench.cli import options as opt
from ssdbench.cli.errors import reports_errors
from ssdbench.cli.run_list import DEFAULT_RUNS_DIR, check_runs_folder, list_runs
from ssdbench.run.settings import DEFAULT_DRAFT, DEFAULT_TARGET
from ssdbench.errors import UsageError
from ssdbench.records import strict_json

NOTABLE_PACKAGES = ("torch", "transformers", "flash-attn", "nvidia-ml-py", "pyarrow")
CONTEXT_TOKENS = 2048  # validate's one sequence, unless the models' context is shorter
Format = Annotated[str, typer.Option("--format", help="table or json.")]


def _embedded_status() -> dict:
    from ssdbench.models.checkpoint.embedded import INSTALL_COMMAND, embedded_gguf_path
    from ssdbench.cache import cache_root
    from ssdbench.models.checkpoint.weights import cached_sha256, read_conversion_record

    try:
        gguf = embedded_gguf_path()
    except Exception as err:  # noqa: BLE001 - not installed: say why, never fail `ls`
        return {"name": DEFAULT_TARGET, "installed": False, "converted": False, "detail": str(err)}
    sha256 = cached_sha256(gguf)
    models = cache_root() / "models"
    folders = [f for f in models.iterdir() if (read_conversion_record(f) or {}).get("gguf_sha256") == sha256] \
        if models.is_dir() else []
    detail = str(folders[0]) if folders else f"{gguf} (converted on first use, ~30 s)"
    return {"name": DEFAULT_TARGET, "installed": True, "converted": bool(folders), "detail": detail,
            "install": INSTALL_COMMAND}


def _aliases() -> list[dict]:
    from ssdbench.models.checkpoint.aliases import ALIASES
    from ssdbench.models.checkpoint.source import hub_cache_dir

    hub = hub_cache_dir()
    rows = []
    for alias, repo in ALIASES.items():
        snapshots = hub / f"models--{repo.replace('/', '--')}" / "snapshots"
        rows.append({"alias": alias, "repo_id": repo, "cached": snapshots.is_dir() and any(snapshots.iterdir())})
    return rows


def _packages() -> dict:
    from ssdbench.records.manifest import package_versions

    info: dict = {"versions": package_versions(NOTABLE_PACKAGES)}
    try:
        import torch
    except ImportError:
        return {**info, "cuda_available": False, "cuda_devices": []}
    is_cuda = torch.cuda.is_available()
    devices = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if is_cuda else []
    return {**info, "cuda_available": is_cuda, "torch_cuda": torch.version.cuda, "cuda_devices": devices}


def inventory(data_dir: Path | None) -> dict:
    """Everything `ls` shows, as plain data."""
    from ssdbench.kernels.registry import list_backends
    from ssdbench.methods.registry import METHODS
    from ssdbench.models.drafts import KINDS
    from ssdbench.run.settings import ENGINES
    from ssdbench.suites import list_suites

    return {
        "methods": [{"name": m.name, "note": m.summary} for m in METHODS.values()],
        "drafts": [{"name": d.name, "note": d.summary} for d in KINDS.values()],
        "engines": list(ENGINES),
        "endpoint_kinds": _endpoint_kinds(),
        "attention_backends": [{"name": n, "available": ok, "reason": why} for n, ok, why in list_backends()],
        "suites": [{"name": s.name, "available": s.is_available, "description": s.description, "origin": s.origin,
                    "detail": s.detail} for s in list_suites(data_dir=data_dir)],
        "embedded_default": _embedded_status(),
        "aliases": _aliases(),
        "packages": _packages(),
    }


def _endpoint_kinds() -> list[dict]:
    from ssdbench.endpoints.engines.registry import ENGINES

    rows = []
    for engine in ENGINES:
        row = {"name": engine.name, "acceptance": engine.acceptance_source, "note": engine.note}
        if engine.local_build is not None:
            row["local_build"] = engine.local_build()
        rows.append(row)
    return rows


def _yes(flag: bool) -> str:
    return "[green]yes[/]" if flag else "[yellow]no[/]"


def _table(title: str, headers: tuple[str, ...], rows: list[tuple[str, ...]]):
    from rich.table import Table

    table = Table(title=title, title_justify="left", show_edge=False, pad_edge=False)
    for header in headers:
        table.add_column(header, overflow="fold")
    for row in rows:
        table.add_row(*row)
    return table


def _print_inventory(info: dict) -> None:
    from rich.console import Console
    from rich.markup import escape

    console = Console()
    if not console.is_terminal and console.width < 160:  # pipes and CI logs: fewer wrapped cells
        console.width = 160
    methods = [(m["name"], m["note"]) for m in info["methods"]]
    console.print(_table("methods", ("name", "what"), methods + [("engines", ", ".join(info["engines"]))]))
    console.print(_table("serving engines (--endpoint NAME=URL)", ("kind", "acceptance read from", "note"), [
        (k["name"], k["acceptance"], escape(k["note"] + (f" Local build: {k['local_build']}." if "local_build" in k
                                                          else ""))) for k in info["endpoint_kinds"]]))
    console.print(_table("drafts (--draft)", ("name", "what"), [(d["name"], d["note"]) for d in info["drafts"]]))
    console.print(_table("attention backends", ("name", "available", "why not"), [
        (b["name"], _yes(b["available"]), escape(b["reason"])) for b in info["attention_backends"]]))
    console.print(_table("suites", ("name", "available", "what", "reads / why not"), [
        (s["name"], _yes(s["available"]), escape(s["description"]),
         escape(s["detail"] if s["available"] else f"{s['origin']}: {s['detail'].split(';')[0]}"))
        for s in info["suites"]]))
    e = info["embedded_default"]
    models = [(e["name"] + " (embedded default)", "pip package", _yes(e["installed"]),
               f"converted {_yes(e['converted'])}: {escape(e['detail'])}")]
    models += [(a["alias"], a["repo_id"], _yes(a["cached"]), "") for a in info["aliases"]]
    console.print(_table("models", ("name", "repo id", "found locally", "detail"), models))
    p = info["packages"]
    rows = [(name, version or "[yellow]not installed[/]") for name, version in p["versions"].items()]
    rows.append(("CUDA", f"{_yes(p['cuda_available'])} {escape(', '.join(p['cuda_devices']))}"))
    console.print(_table("packages", ("package", "version"), rows))
    if info["runs"]:
        console.print(_table("runs", ("run", "methods", "state", "detail"), [
            (escape(r["path"]), r.get("methods", ""), r["state"], escape(r["detail"])) for r in info["runs"]]))


RunsDir = Annotated[Optional[Path], typer.Option(
    "--runs", help="Folder of run directories to list with their state (complete, damaged, failed, interrupted, "
    f"running, died). Default: ./{DEFAULT_RUNS_DIR} when it exists.", show_default=False)]


@reports_errors
def ls_command(data_dir: opt.DataDir = None, runs: RunsDir = None, format: Format = "table") -> None:
    if format not in ("table", "json"):
        raise UsageError(f"--format must be 'table' or 'json', got {format!r}")
    if runs is not None:
        check_runs_folder(runs)
    info = {**inventory(data_dir), "runs": list_runs(runs or DEFAULT_RUNS_DIR)}
    if format == "json":
        typer.echo(strict_json.dumps(info, default=str))
    else:
        _print_inventory(info)


def _free_bytes(device: str) -> int | None:
    """What `device` has free now (the run's own reading; tests replace it to see a refusal)."""
    from ssdbench.run.limits import available_bytes

    return available_bytes(device)


def _memory_line(memory: dict, positions: int, *, is_context: bool) -> str:
    """Each role's weights, KV cache and activations, the total, and what each device has free."""
    roles = memory.get("roles")
    if roles is None:
        return f"memory: {memory['estimate']}"
    parts = [f"{r['role']} {r['weights_mib']:,.1f} MiB + KV {r['kv_cache_mib']:,.1f} MiB + activations "
             f"{r['activations_mib']:,.1f} MiB" for r in roles]
    needed = sum(r["weights_mib"] + r["kv_cache_mib"] + r["activations_mib"] for r in roles)
    free = ", ".join(f"{'unknown' if mib is None else f'{mib:,.0f} MiB'} on {device}"
                     for device, mib in memory["available_mib"].items())
    span = f"{positions} positions, the models' context" if is_context else f"{positions} tokens"
    return f"memory: {'; '.join(parts)} (1 sequence × {span}) ≈ {needed:,.1f} MiB needed; {free} available"


@reports_errors
def validate_command(target: opt.Target = DEFAULT_TARGET, draft: opt.Draft = DEFAULT_DRAFT,
                     device: opt.Device = "cpu", dtype: opt.Dtype = "float32",
                     trust_remote_code: opt.TrustRemoteCode = False, tp: opt.TensorParallel = 1) -> None:
    """Resolve target and draft, check vocabularies and memory; runs nothing.

    The checks are `run`'s own (run.plan, run.model_checks, run.limits) on a plan of ar and sd
    with one new token, for one sequence of CONTEXT_TOKENS or the models' context if shorter."""
    from rich.console import Console

    from ssdbench.models.model_set import ModelSet
    from ssdbench.run.limits import check_memory_of
    from ssdbench.run.model_checks import check_models
    from ssdbench.run.plan import build_plan
    from ssdbench.run.settings import RunSettings

    plan = build_plan(RunSettings(target=target, draft=draft, device=device, dtype=dtype, tp=tp,
                                  trust_remote_code=trust_remote_code, max_new_tokens=1))
    models = ModelSet(plan.models)
    limit = check_models(plan, models)
    positions = min(CONTEXT_TOKENS, limit or CONTEXT_TOKENS)
    prompt_tokens = max(positions - plan.decode.max_new_tokens - plan.draft_slack, 1)
    memory = check_memory_of(plan, models, prompt_tokens, 1, available=_free_bytes)
    source, draft_source = models.target_source, models.draft_source
    draft_text = f"{draft_source.name} ({draft_source.kind}: {draft_source.path})" if draft_source \
        else plan.draft.info.summary
    vocabulary = "shared by target and draft" if draft_source else "the target's (no separate draft model)"
    console = Console()
    console.print(f"target: {source.name} ({source.kind}: {source.path})")
    console.print(f"draft: {draft_text}")
    console.print(f"vocabulary: {vocabulary}, {models.vocab_size} tokens")
    console.print(f"device: {plan.models.device} · dtype {dtype}" + (f" · target split over {tp} ranks (--tp)" if tp > 1 else ""))
    console.print(_memory_line(memory, positions, is_context=positions == limit))
    console.print("[green]ok[/]: the pair resolves, its weight files are whole and match config.json, it shares a "
                  "vocabulary and fits; nothing was run")
