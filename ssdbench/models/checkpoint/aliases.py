"""Short model names a user can type instead of a Hugging Face repo id.

The instruct variants are the ones the SSD paper benchmarks (Qwen3 checkpoints are
instruct-tuned under their plain names). "smollm2-135m" is listed for completeness; the
resolver serves it from the embedded GGUF before it ever looks here.
"""

from __future__ import annotations

import difflib

ALIASES: dict[str, str] = {
    "llama-3.1-8b": "meta-llama/Llama-3.1-8B-Instruct",
    "llama-3.1-70b": "meta-llama/Llama-3.1-70B-Instruct",
    "llama-3.2-1b": "meta-llama/Llama-3.2-1B-Instruct",
    "llama-3.2-3b": "meta-llama/Llama-3.2-3B-Instruct",
    "llama-3.3-70b": "meta-llama/Llama-3.3-70B-Instruct",
    "qwen3-0.6b": "Qwen/Qwen3-0.6B",
    "qwen3-1.7b": "Qwen/Qwen3-1.7B",
    "qwen3-4b": "Qwen/Qwen3-4B",
    "qwen3-8b": "Qwen/Qwen3-8B",
    "qwen3-14b": "Qwen/Qwen3-14B",
    "qwen3-32b": "Qwen/Qwen3-32B",
    "qwen2.5-0.5b": "Qwen/Qwen2.5-0.5B-Instruct",
    "qwen2.5-1.5b": "Qwen/Qwen2.5-1.5B-Instruct",
    "qwen2.5-7b": "Qwen/Qwen2.5-7B-Instruct",
    "qwen2.5-32b": "Qwen/Qwen2.5-32B-Instruct",
    "qwen2.5-72b": "Qwen/Qwen2.5-72B-Instruct",
    "smollm2-135m": "HuggingFaceTB/SmolLM2-135M-Instruct",
    "smollm2-360m": "HuggingFaceTB/SmolLM2-360M-Instruct",
    "smollm2-1.7b": "HuggingFaceTB/SmolLM2-1.7B-Instruct",
}


def alias_repo_id(name: str) -> str | None:
    """The repo id for an alias (any letter case), or None."""
    return ALIASES.get(name.strip().lower())


def close_names(name: str, known: list[str] | tuple[str, ...] = (), *, num: int = 3) -> list[str]:
    """Known names that look like a typo of `name`, closest first."""
    by_lower = {candidate.lower(): candidate for candidate in sorted(set(ALIASES) | set(known))}
    matches = difflib.get_close_matches(name.strip().lower(), list(by_lower), n=num, cutoff=0.6)
    return [by_lower[match] for match in matches]
