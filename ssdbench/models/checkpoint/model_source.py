"""A model resolved to a local folder: what every loader takes."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ModelSource:
    """A model resolved to a local folder holding config.json, safetensors and tokenizer files."""

    spec: str  # what the user typed
    name: str  # display name, e.g. "SmolLM2-135M-Instruct"
    kind: str  # "folder" | "hub-cache" | "gguf" | "embedded"
    path: Path
    origin: str  # where it came from: GGUF file, repo id @ commit, folder
    trust_remote_code: bool = False  # whether transformers may run the folder's own code
