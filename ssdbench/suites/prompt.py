"""The two data types every suite loader produces: a prompt and a named, hashable set of them."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Prompt:
    """One request to decode from.

    `prompt_id` is "<suite>/<id>" and stays the same across runs, so records from different
    methods can be joined on it. `text` is the first user turn; `turns` keeps every user
    turn where the source has several (MT-Bench, Spec-Bench), otherwise it is empty.
    """

    prompt_id: str
    text: str
    category: str | None = None
    turns: tuple[str, ...] = ()
    # where `text` came from: a field name ("prompt", "text", "instruction+input", ...) or
    # "string" for a bare JSON string; provenance only, so it takes no part in equality
    text_field: str = field(default="prompt", compare=False)


@dataclass(frozen=True)
class Suite:
    """A named, ordered set of prompts and where it was read from (for the run manifest)."""

    name: str
    source: str
    prompts: tuple[Prompt, ...]

    def content_hash(self) -> str:
        """sha256 over the prompt ids and texts, in order.

        It ignores `name` and `source`, so the same prompts read from a different folder
        (or through a path instead of a suite name) hash the same, and runs compare.
        """
        payload = json.dumps(
            [[p.prompt_id, p.text] for p in self.prompts], ensure_ascii=False, separators=(",", ":")
        )
        return hashlib.sha256(payload.encode("utf-8")).hexdigest()

    def text_fields(self, count: int | None = None) -> dict[str, int]:
        """How many of the first `count` prompts took their text from each field (for the manifest)."""
        used: dict[str, int] = {}
        for prompt in self.prompts[:count]:
            used[prompt.text_field] = used.get(prompt.text_field, 0) + 1
        return used

    def __len__(self) -> int:
        return len(self.prompts)
