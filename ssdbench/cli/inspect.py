"""`ssdbench ls` (what this machine offers) and `ssdbench validate` (would this pair run here?)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ssdbench.cli import options as opt
from ssdbench.cli.errors import reports_errors
from ssdbench.cli.run_list import DEFAULT_RUNS_DIR, list_runs
from ssdbench.run.settings import DEFAULT_DRAFT, DEFAULT_TARGET, DTYPES
from ssdbench.errors import UsageError
from ssdbench.records import strict_json
from ssdbench.profiling.devices import check_device

NOTABLE_PACKAGES = ("torch", "transformers", "flash-attn", "nvidia-ml-py", "pyarrow")
CONTEXT_TOKENS = 2048  # per sequence, for validate's KV-cache estimate
Format = Annotated[str, typer.Option("--format", help="table or json.")]


def _embedded_status() -> dict:
    from ssdbench.models.embedded import INSTALL_COMMAND, embedded_gguf_path
    from ssdbench.models.weights import cached_sha256, read_conversion_record, ssdbench_cache_dir

    try:
        gguf = embedded_gguf_path()
    except Exception as err:  # noqa: BLE001 - not installed: say why, never fail `ls`
        return {"name": DEFAULT_TARGET, "installed": False, "converted": False, "detail": str(err)}
    sha256 = cached_sha256(gguf)
    models = ssdbench_cache_dir() / "models"
    folders = [f for f in models.iterdir() if (read_conversion_record(f) or {}).get("gguf_sha256") == sha256] \
        if models.is_dir() else []
    detail = str(folders[0]) if folders else f"{gguf} (converted on first use, ~30 s)"
    return {"name": DEFAULT_TARGET, "installed": True, "converted": bool(folders), "detail": detail,
            "install": INSTALL_COMMAND}


def _aliases() -> list[dict]:
    from ssdbench.models.aliases import ALIASES
    from ssdbench.models.source import hub_cache_dir

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
    from ssdbench.endpoints.build_llama_server import server_binary
    from ssdbench.endpoints.kinds import KINDS

    built = server_binary()
    rows = [{"name": k.name, "acceptance": k.acceptance, "note": k.note} for k in KINDS]
    rows[0]["local_build"] = str(built) if built else "not built (make llama-server)"
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


RunsDir = Annotated[Path, typer.Option("--runs", help="Folder of run directories to list with their state "
                                       "(complete, failed, interrupted, running, died).")]


@reports_errors
def ls_command(data_dir: opt.DataDir = None, runs: RunsDir = DEFAULT_RUNS_DIR, format: Format = "table") -> None:
    if format not in ("table", "json"):
        raise UsageError(f"--format must be 'table' or 'json', got {format!r}")
    info = {**inventory(data_dir), "runs": list_runs(runs)}
    if format == "json":
        typer.echo(strict_json.dumps(info, default=str))
    else:
        _print_inventory(info)


def _available_mib(device) -> float | None:
    from ssdbench.run.limits import available_bytes

    free = available_bytes(str(device))
    return None if free is None else free / 2**20


def _memory_mib(config, dtype, *, weight_itemsize: float | None = None, tp: int = 1) -> tuple[float, float]:
    """(weights, KV cache for one sequence of CONTEXT_TOKENS) in MiB for a model config (one rank's of `tp`)."""
    from ssdbench.models.shape import ModelShape

    shape = ModelShape.from_hf_config(config).tensor_parallel_shard(tp)
    itemsize = dtype.itemsize
    weights = shape.num_params() * (weight_itemsize or itemsize)
    kv = 2 * shape.num_layers * shape.num_kv_heads * shape.head_dim * itemsize * CONTEXT_TOKENS
    return weights / 2**20, kv / 2**20


def _check_tensor_parallel_memory(config, dtype: str, device: str, tp: int) -> None:
    """Each of the target's `tp` ranks fits its device (one line naming the first that does not)."""
    from ssdbench.models import memory_plan as mp
    from ssdbench.models.shape import ModelShape
    from ssdbench.models.tensor_parallel import rank_devices
    from ssdbench.run.limits import available_bytes

    ranks = rank_devices(str(device), tp)
    for rank in ranks[1:]:
        check_device(rank, flag=f"--tp {tp} (its rank on {rank})")
    lengths = mp.Lengths(batch_size=1, prompt_tokens=CONTEXT_TOKENS, max_new_tokens=0, k=0)
    itemsize = {"float32": 4, "bfloat16": 2, "float16": 2}[dtype]
    needs = mp.tensor_parallel_needs(ModelShape.from_hf_config(config), lengths, devices=ranks, itemsize=itemsize)
    short = mp.shortfall(needs, available_bytes)
    if short is not None:
        where, needed, free = short
        raise UsageError(f"not enough memory on {where} for the target split over {tp} ranks: about "
                         f"{mp.mib(needed)} needed, {mp.mib(free)} available")


def _resolve_pair(target: str, draft: str, *, trust_remote_code: bool):
    """(target source, draft source or None, draft description); vocabularies, tensor names and shapes checked."""
    from ssdbench.models.drafts import parse_draft
    from ssdbench.models.source import resolve_model
    from ssdbench.models.weights import check_same_vocabulary, check_weights_match_config, load_config, load_tokenizer

    target_source = resolve_model(target, trust_remote_code=trust_remote_code)
    check_weights_match_config(target_source, load_config(target_source))
    choice = parse_draft(draft)
    if choice.model_spec is None:
        return target_source, None, choice.info.summary
    draft_source = resolve_model(choice.model_spec, trust_remote_code=trust_remote_code)
    check_weights_match_config(draft_source, load_config(draft_source))
    check_same_vocabulary((load_config(target_source), load_tokenizer(target_source)),
                          (load_config(draft_source), load_tokenizer(draft_source)))
    return target_source, draft_source, f"{draft_source.name} ({draft_source.kind}: {draft_source.path})"


@reports_errors
def validate_command(target: opt.Target = DEFAULT_TARGET, draft: opt.Draft = DEFAULT_DRAFT,
                     device: opt.Device = "cpu", dtype: opt.Dtype = "float32",
                     trust_remote_code: opt.TrustRemoteCode = False, tp: opt.TensorParallel = 1) -> None:
    """Resolve target and draft, check vocabularies and memory; runs nothing."""
    from rich.console import Console

    from ssdbench.models.model_set import SELF_INT8, torch_dtype
    from ssdbench.models.weights import load_config

    if dtype not in DTYPES:
        raise UsageError(f"--dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    dev = check_device(device)
    target_source, draft_source, draft_text = _resolve_pair(target, draft, trust_remote_code=trust_remote_code)
    config = load_config(target_source)
    if tp != 1:
        _check_tensor_parallel_memory(config, dtype, device, tp)
    weights, kv = _memory_mib(config, torch_dtype(dtype), tp=tp)
    draft_weights, draft_kv = (0.0, 0.0)
    if draft_source is not None:
        draft_weights, draft_kv = _memory_mib(load_config(draft_source), torch_dtype(dtype))
    elif draft == SELF_INT8:
        draft_weights, draft_kv = _memory_mib(config, torch_dtype(dtype), weight_itemsize=1)
    needed, available = weights + kv + draft_weights + draft_kv, _available_mib(dev)  # the first GPU: rank 0 + draft
    if available is not None and needed > available:
        raise UsageError(f"not enough memory on {dev}: about {needed:,.0f} MiB needed, {available:,.0f} MiB available")
    vocabulary = "shared by target and draft" if draft_source else "the target's (no separate draft model)"
    console = Console()
    console.print(f"target: {target_source.name} ({target_source.kind}: {target_source.path})")
    console.print(f"draft: {draft_text}")
    console.print(f"vocabulary: {vocabulary}, {config.vocab_size} tokens")
    console.print(f"device: {dev} · dtype {dtype}" + (f" · target split over {tp} ranks (--tp)" if tp > 1 else ""))
    console.print(f"memory: target{' rank 0' if tp > 1 else ''} {weights:,.1f} MiB + KV {kv:,.1f} MiB, draft {draft_weights:,.1f} MiB + KV "
                  f"{draft_kv:,.1f} MiB (1 sequence × {CONTEXT_TOKENS} tokens) ≈ {needed:,.1f} MiB needed; "
                  f"{'unknown' if available is None else f'{available:,.0f} MiB'} available")
    console.print("[green]ok[/]: the pair resolves, its weight files are whole and match config.json, it shares a "
                  "vocabulary and fits; nothing was run")
