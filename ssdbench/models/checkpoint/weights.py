"""Reading a resolved model folder: config, weights, tokenizer, file hashes, vocabulary check.

A resolved folder (see `source.py`) holds config.json, safetensors weights (one file, or
shards with an index) and tokenizer files. transformers and torch are imported inside the
functions that need them, so importing this module stays cheap.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ssdbench.cache import cache_root
from ssdbench.errors import UsageError

if TYPE_CHECKING:
    import torch

    from ssdbench.models.checkpoint.model_source import ModelSource

SAFETENSORS_INDEX = "model.safetensors.index.json"
SAFETENSORS_SINGLE = "model.safetensors"
PYTORCH_WEIGHT_SUFFIXES = (".bin", ".pt", ".pth")
CONVERSION_RECORD = "ssdbench-conversion.json"  # written last into a converted folder
_HEX64 = re.compile(r"[0-9a-f]{64}")


def weight_files(folder: Path) -> list[Path]:
    """The safetensors files that hold the model's weights; a UsageError when there are none."""
    index = folder / SAFETENSORS_INDEX
    if index.is_file():
        shard_names = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        missing = [name for name in shard_names if not (folder / name).is_file()]
        if missing:
            raise UsageError(f"model folder {folder} is incomplete: {len(missing)} shard(s) listed in "
                             f"{SAFETENSORS_INDEX} are missing, e.g. {missing[0]}")
        return [folder / name for name in shard_names]
    if (folder / SAFETENSORS_SINGLE).is_file():
        return [folder / SAFETENSORS_SINGLE]
    files = sorted(folder.glob("model*.safetensors")) or sorted(folder.glob("*.safetensors"))
    if files:
        return files
    if any(p.suffix in PYTORCH_WEIGHT_SUFFIXES for p in folder.iterdir()):
        raise UsageError(f"model folder {folder} has only PyTorch .bin/.pt weights; ssdbench reads safetensors "
                         f"(re-save it with transformers' save_pretrained, which writes safetensors)")
    raise UsageError(f"model folder {folder} has config.json but no *.safetensors weights")


def check_weight_files(folder: Path) -> None:
    """Every weight file whole and valid safetensors (headers only), else a one-line UsageError."""
    from ssdbench.models.checkpoint.safetensors_header import read_headers

    read_headers(weight_files(folder))


def check_weights_match_config(source: ModelSource, config) -> None:
    """Tensor names and shapes in the headers are those config.json implies for the native engine."""
    from ssdbench.models.checkpoint.safetensors_header import check_against_shapes, read_headers
    from ssdbench.models.shape import ModelShape, hf_param_shapes

    expected = hf_param_shapes(ModelShape.from_hf_config(config))
    check_against_shapes(read_headers(weight_files(source.path)), expected, folder=source.path)


def load_config(source: ModelSource):
    """transformers' config for the folder (a LlamaConfig, Qwen3Config, ...)."""
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(str(source.path), trust_remote_code=source.trust_remote_code)
    except (OSError, ValueError) as err:  # an unknown model_type, a malformed config.json
        raise UsageError(f"cannot read {source.path / 'config.json'}: {_one_line(err)}") from None


def load_tokenizer(source: ModelSource):
    """transformers' tokenizer for the folder, chat template included."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(source.path), trust_remote_code=source.trust_remote_code)
    except (OSError, ValueError) as err:  # no or damaged tokenizer files
        raise UsageError(f"cannot load the tokenizer of {source.path}: {_one_line(err)}") from None


def _one_line(err: Exception, limit: int = 300) -> str:
    """transformers' messages span lines (and name every file tried): one line, cut at `limit` characters."""
    text = " ".join(str(err).split()) or type(err).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"


def load_state_dict(source: ModelSource, *, dtype: torch.dtype, device: str = "cpu") -> dict[str, torch.Tensor]:
    """All parameters under transformers' names, floating ones cast to `dtype`.

    A tied model has no "lm_head.weight" (use "model.embed_tokens.weight"); an untied one must.
    """
    from safetensors import safe_open

    state: dict[str, torch.Tensor] = {}
    for file in weight_files(source.path):
        with safe_open(str(file), framework="pt", device=str(device)) as reader:
            for key in reader.keys():
                tensor = reader.get_tensor(key)
                state[key] = tensor.to(dtype) if tensor.is_floating_point() else tensor
    tied = _tie_word_embeddings(source.path)
    if tied:
        state.pop("lm_head.weight", None)
    elif tied is False and "lm_head.weight" not in state:
        raise UsageError(f"model folder {source.path} has untied embeddings but no lm_head.weight")
    return state


def lazy_state_lookup(source: ModelSource, *, dtype: torch.dtype):
    """name -> that one parameter read from its safetensors file (floating ones cast to `dtype`), or None:
    what load_state_dict gives, without holding the whole checkpoint in memory (a tensor-parallel rank
    keeps only its slices). A tied model answers None for "lm_head.weight", as load_state_dict's dict does."""
    from safetensors import safe_open

    where: dict[str, Path] = {}
    for file in weight_files(source.path):
        with safe_open(str(file), framework="pt") as reader:
            where.update((key, file) for key in reader.keys())
    if _tie_word_embeddings(source.path):
        where.pop("lm_head.weight", None)

    def lookup(name: str) -> torch.Tensor | None:
        if name not in where:
            return None
        with safe_open(str(where[name]), framework="pt") as reader:
            tensor = reader.get_tensor(name)
        return tensor.to(dtype) if tensor.is_floating_point() else tensor

    return lookup


def _tie_word_embeddings(folder: Path) -> bool | None:
    """config.json's tie_word_embeddings; None when it does not say (the weights then tell)."""
    config = json.loads((folder / "config.json").read_text())
    for section in (config.get("text_config") or {}, config):
        if "tie_word_embeddings" in section:
            return bool(section["tie_word_embeddings"])
    return None


def weight_file_hashes(source: ModelSource, *, cache_dir: Path | str | None = None) -> dict[str, str]:
    """sha256 of each weight file, by name relative to the folder, for the run manifest.

    A converted folder carries its hashes (and its GGUF's) from conversion time; a Hugging Face
    cache blob is named by its sha256; anything else is hashed once and remembered by
    (path, size, mtime) under the ssdbench cache.
    """
    record = read_conversion_record(source.path)
    if record is not None:
        return dict(record["hashes"])
    return {str(f.relative_to(source.path)): cached_sha256(f, cache_dir=cache_dir) for f in weight_files(source.path)}


def read_conversion_record(folder: Path) -> dict[str, Any] | None:
    """The record a GGUF conversion leaves in its folder, or None for any other folder."""
    try:
        return json.loads((folder / CONVERSION_RECORD).read_text())
    except (OSError, ValueError):
        return None


def cached_sha256(path: Path, *, cache_dir: Path | str | None = None) -> str:
    """sha256 of a file; cheap when seen before (same path, size and mtime)."""
    real = Path(os.path.realpath(path))
    if real.parent.name == "blobs" and _HEX64.fullmatch(real.name):
        return real.name  # Hugging Face cache: LFS blobs are stored under their sha256
    stat = real.stat()
    key = {"path": str(real), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
    memo = cache_root(cache_dir) / "hashes" / (hashlib.sha256(str(real).encode()).hexdigest()[:24] + ".json")
    try:
        remembered = json.loads(memo.read_text())
        if {k: remembered.get(k) for k in key} == key:
            return remembered["sha256"]
    except (OSError, ValueError, KeyError):
        pass
    digest = sha256_of_file(real)
    _write_json_atomic(memo, {**key, "sha256": digest})
    return digest


def sha256_of_file(path: Path) -> str:
    """sha256 of a file, read in 4 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 22):
            digest.update(block)
    return digest.hexdigest()


def _write_json_atomic(path: Path, data: dict) -> None:
    """Best effort: a cache entry that cannot be written is only recomputed next time."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=1))
        os.replace(tmp, path)
    except OSError:
        pass


def check_same_vocabulary(target: Any, draft: Any) -> None:
    """Raise UsageError unless target and draft share one vocabulary.

    Each side is a config, a tokenizer, or a (config, tokenizer) pair. Configs must agree on
    vocab_size (the width of p and q); tokenizers, when both are given, on every token's id.
    """
    target_config, target_tok = _config_and_tokenizer(target)
    draft_config, draft_tok = _config_and_tokenizer(draft)
    if target_config is not None and draft_config is not None:
        p_size, q_size = _config_vocab_size(target_config), _config_vocab_size(draft_config)
        if p_size != q_size:
            raise UsageError(f"target and draft vocabularies differ: target {p_size} tokens, draft {q_size} tokens")
    if target_tok is None or draft_tok is None:
        return
    p_vocab, q_vocab = target_tok.get_vocab(), draft_tok.get_vocab()
    if len(p_vocab) != len(q_vocab):
        raise UsageError(f"target and draft vocabularies differ: target {len(p_vocab)} tokens, "
                         f"draft {len(q_vocab)} tokens")
    num_different = sum(1 for token, idx in p_vocab.items() if q_vocab.get(token) != idx)
    if num_different:
        raise UsageError(f"target and draft vocabularies differ: both {len(p_vocab)} tokens, "
                         f"but {num_different} of them have different ids")


def _config_and_tokenizer(side: Any) -> tuple[Any, Any]:
    if isinstance(side, (tuple, list)):
        config, tokenizer = side
        return config, tokenizer
    if hasattr(side, "get_vocab"):
        return None, side
    return side, None


def _config_vocab_size(config: Any) -> int:
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    return int(text.vocab_size)
