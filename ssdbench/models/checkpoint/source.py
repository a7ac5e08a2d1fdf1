"""From what a user types (`--target`, `--draft`) to a local model folder.

Resolution order for a spec:
1. "default", "smollm2", "smollm2-135m": the embedded SmolLM2-135M-Instruct (see embedded.py);
2. a path to a .gguf file: converted once into a safetensors folder in the ssdbench cache;
3. an existing folder with config.json and safetensors weights (sharded or not);
4. an alias (aliases.py) or an `org/name[@revision]` repo id: the local Hugging Face cache,
   and only with `allow_download` a download (otherwise no network at all).
Whatever resolves is a folder with config.json, safetensors weights and tokenizer files.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from ssdbench.errors import ModelNotFoundError, UsageError
from ssdbench.models.checkpoint.aliases import alias_repo_id, close_names
from ssdbench.models.checkpoint.embedded import (
    EMBEDDED_NAMES, check_gguf_magic, converted_folder, embedded_gguf_path, embedded_origin, gguf_model_name,
)
from ssdbench.models.checkpoint.model_source import ModelSource
from ssdbench.models.checkpoint.remote_code import check_remote_code
from ssdbench.models.checkpoint.weights import check_weight_files, read_conversion_record
from ssdbench.paths import check_reachable

DOWNLOAD_FLAG = "--allow-download"
# What a download fetches: config, safetensors, tokenizer; never .bin copies or original/*.pth.
HUB_PATTERNS = ("*.json", "*.safetensors", "*.jinja", "tokenizer*", "*.model", "*.tiktoken", "merges.txt")
_REPO_ID = re.compile(r"[\w.-]+/[\w.-]+")


def resolve_model(spec: str, *, allow_download: bool = False, cache_dir: Path | str | None = None,
                  trust_remote_code: bool = False) -> ModelSource:
    """Resolve `spec` to a local model folder; ModelNotFoundError says where it looked.

    `cache_dir` is ssdbench's own cache (converted GGUFs), not the Hugging Face cache, which
    is found from HF_HUB_CACHE / HF_HOME as huggingface_hub does.
    """
    text = spec.strip()
    if not text:
        raise UsageError("empty model name: pass a folder, a .gguf file, an alias or an org/name repo id")
    if text.lower() in EMBEDDED_NAMES:
        gguf = embedded_gguf_path()
        folder = converted_folder(gguf, cache_dir=cache_dir)
        return ModelSource(spec, gguf_model_name(gguf), "embedded", folder, embedded_origin(gguf))
    path = Path(text).expanduser()
    check_reachable(path, what="model path")
    if path.suffix.lower() == ".gguf":
        return _gguf_source(spec, path, cache_dir=cache_dir)
    if path.is_dir():
        return _folder_source(spec, path, trust_remote_code=trust_remote_code)
    if path.exists():
        raise UsageError(f"{path.resolve()} is neither a model folder nor a .gguf file")
    return _hub_source(spec, path, allow_download=allow_download, trust_remote_code=trust_remote_code)


def hub_cache_dir() -> Path:
    """The Hugging Face hub cache, from the environment at call time (as huggingface_hub reads it)."""
    env = os.environ
    explicit = env.get("HF_HUB_CACHE") or env.get("HUGGINGFACE_HUB_CACHE")
    if explicit:
        return Path(os.path.expandvars(explicit)).expanduser()
    home = env.get("HF_HOME") or os.path.join(env.get("XDG_CACHE_HOME") or Path.home() / ".cache", "huggingface")
    return Path(os.path.expandvars(str(home))).expanduser() / "hub"


def _gguf_source(spec: str, path: Path, *, cache_dir: Path | str | None) -> ModelSource:
    if not path.is_file():
        raise ModelNotFoundError(f"model '{spec}' not found: no file {path.resolve()}")
    check_gguf_magic(path)
    folder = converted_folder(path, cache_dir=cache_dir)
    sha256 = (read_conversion_record(folder) or {}).get("gguf_sha256", "?")
    return ModelSource(spec, gguf_model_name(path), "gguf", folder, f"{path.resolve()} (sha256 {sha256[:12]})")


def _folder_source(spec: str, path: Path, *, trust_remote_code: bool) -> ModelSource:
    folder = path.resolve()
    _check_folder(folder, trust_remote_code=trust_remote_code)
    return ModelSource(spec, _folder_name(folder), "folder", folder, str(folder), trust_remote_code)


def _check_folder(folder: Path, *, trust_remote_code: bool) -> None:
    """config.json and safetensors weights present, no code unless trusted, else a one-line UsageError."""
    if not (folder / "config.json").is_file():
        ggufs = sorted(folder.glob("*.gguf"))
        hint = f"; to use its GGUF file, pass the file itself: {ggufs[0]}" if ggufs else ""
        raise UsageError(f"model folder {folder} has no config.json{hint}")
    check_remote_code(folder, trust_remote_code=trust_remote_code)
    check_weight_files(folder)


def _folder_name(folder: Path) -> str:
    """The folder's name, or the repo's for a Hugging Face snapshot folder (named by commit)."""
    if folder.parent.name == "snapshots" and folder.parent.parent.name.startswith("models--"):
        return folder.parent.parent.name.split("--")[-1]
    return folder.name


def _split_repo_spec(text: str) -> tuple[str | None, str | None]:
    """(repo id, revision) for an alias or `org/name[@revision]`; (None, None) for anything else."""
    name, _, revision = text.partition("@")
    repo_id = alias_repo_id(name) or (name if _REPO_ID.fullmatch(name) else None)
    return repo_id, (revision or None)


def _hub_source(spec: str, path: Path, *, allow_download: bool, trust_remote_code: bool) -> ModelSource:
    repo_id, revision = _split_repo_spec(spec.strip())
    hub_dir = hub_cache_dir()
    if repo_id is None:
        raise ModelNotFoundError(_not_found_message(spec, path, None, hub_dir, "not an alias or an org/name repo id"))
    folder = _cached_snapshot(repo_id, revision, hub_dir)
    reason = f"downloads are off ({DOWNLOAD_FLAG} fetches {repo_id})"
    if folder is None and allow_download:
        folder, reason = _download_snapshot(repo_id, revision, hub_dir)
    if folder is None:
        raise ModelNotFoundError(_not_found_message(spec, path, repo_id, hub_dir, reason))
    _check_folder(folder, trust_remote_code=trust_remote_code)
    origin = f"{repo_id}@{folder.name} in {hub_dir}"
    return ModelSource(spec, repo_id.split("/")[-1], "hub-cache", folder, origin, trust_remote_code)


def _cached_snapshot(repo_id: str, revision: str | None, hub_dir: Path) -> Path | None:
    """The snapshot folder already in the cache, without any network access."""
    if not (hub_dir / f"models--{repo_id.replace('/', '--')}").is_dir():
        return None  # nothing to find; skips importing huggingface_hub
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(repo_id, revision=revision, cache_dir=str(hub_dir), local_files_only=True,
                                      allow_patterns=list(HUB_PATTERNS)))
    except (OSError, ValueError):
        return None


def _download_snapshot(repo_id: str, revision: str | None, hub_dir: Path) -> tuple[Path | None, str]:
    """(folder, "") after a download, or (None, one line saying why it failed)."""
    from huggingface_hub import snapshot_download

    try:
        folder = snapshot_download(repo_id, revision=revision, cache_dir=str(hub_dir),
                                   allow_patterns=list(HUB_PATTERNS))
    except (OSError, ValueError) as err:
        cause = err.__cause__ or err  # huggingface_hub wraps connection errors
        first_line = (str(cause).strip().splitlines() or [""])[0]
        return None, f"the download failed ({type(cause).__name__}: {first_line})"
    return Path(folder), ""


def _not_found_message(spec: str, path: Path, repo_id: str | None, hub_dir: Path, reason: str) -> str:
    """One line: every place looked, why nothing more was tried, and names that look close."""
    shown = f"'{spec}'" + (f" ({repo_id})" if repo_id and repo_id != spec.strip() else "")
    places = [f"no folder {path.resolve()}"]
    if repo_id is not None:
        places.append(f"not in the Hugging Face cache {hub_dir}")
    name = spec.strip().partition("@")[0]
    is_alias = alias_repo_id(name) is not None  # typed right; only not downloaded
    suggestions = [] if is_alias else close_names(name, [*EMBEDDED_NAMES, *_cached_repo_ids(hub_dir)])
    hint = f"; did you mean {', '.join(suggestions)}?" if suggestions else ""
    return f"model {shown} not found: {', '.join(places)}; {reason}{hint}"


def _cached_repo_ids(hub_dir: Path) -> list[str]:
    try:
        names = [p.name for p in hub_dir.iterdir() if p.name.startswith("models--")]
    except OSError:
        return []
    return [name[len("models--"):].replace("--", "/", 1) for name in names]
