"""How a prompt becomes token ids: the one place the chat template is (or is not) applied.

Every method (ar, sd, ssd) must decode from identical ids, so they all go through
`render_prompt_ids`, and the manifest records what was done with `describe_template`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from ssdbench.suites.prompt import Prompt


def render_prompt_ids(tokenizer: Any, prompt: Prompt, *, use_chat_template: bool) -> list[int]:
    """Token ids for the prompt's first user turn, as a plain list of ints.

    With a chat template (when asked for and the tokenizer has one) the ids end with the
    assistant's generation prompt; otherwise they are the tokenizer's plain encoding.
    """
    if is_template_applied(tokenizer, use_chat_template):
        encoded = tokenizer.apply_chat_template(chat_messages(prompt.text), add_generation_prompt=True, tokenize=True)
    else:
        encoded = tokenizer(prompt.text)
    return as_id_list(encoded)


def chat_messages(text: str) -> list[dict[str, str]]:
    """The conversation a prompt is: its first user turn alone, no system prompt. The methods' ids are
    this conversation templated here; a chat endpoint gets the same messages and templates them itself."""
    return [{"role": "user", "content": text}]


def describe_template(tokenizer: Any, use_chat_template: bool) -> dict[str, Any]:
    """For the run manifest: whether a chat template was applied, and a hash of it."""
    template = getattr(tokenizer, "chat_template", None)
    return {
        "use_chat_template": use_chat_template,
        "is_applied": is_template_applied(tokenizer, use_chat_template),
        "template_sha256": template_sha256(template) if template else None,
    }


def is_template_applied(tokenizer: Any, use_chat_template: bool) -> bool:
    """A template is applied only when asked for and the tokenizer actually has one."""
    return use_chat_template and bool(getattr(tokenizer, "chat_template", None))


def template_sha256(template: str | Mapping[str, str]) -> str:
    """sha256 of the template text; a dict of named templates is hashed as sorted JSON."""
    text = template if isinstance(template, str) else json.dumps(template, sort_keys=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def as_id_list(encoded: Any) -> list[int]:
    """Flatten what a tokenizer returned into list[int].

    transformers 5 returns a BatchEncoding (a Mapping) from `apply_chat_template(...,
    tokenize=True)`, older versions a list; either may hold a tensor or a batch of one.
    """
    if isinstance(encoded, Mapping):
        encoded = encoded["input_ids"]
    if hasattr(encoded, "tolist"):
        encoded = encoded.tolist()
    if len(encoded) == 1 and isinstance(encoded[0], (list, tuple)):
        encoded = encoded[0]
    ids = [int(i) for i in encoded]
    if not ids:
        raise ValueError("the tokenizer encoded the prompt to zero tokens")
    return ids
