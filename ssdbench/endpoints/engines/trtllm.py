"""TensorRT-LLM's OpenAI-compatible server.

- Acceptance in a response: `avg_decoded_tokens_per_iter` on a choice: tokens per decoding iteration,
  i.e. the acceptance length (target token included). No drafted or accepted counts, no verify steps.
"""

from __future__ import annotations

from ssdbench.endpoints.acceptance import Acceptance, number, object_or_empty
from ssdbench.endpoints.engines.base import Engine

SOURCE = "tensorrt-llm avg_decoded_tokens_per_iter"


def from_choices(event: dict) -> Acceptance | None:
    choices = event.get("choices")
    for n, choice in enumerate(choices if isinstance(choices, list) else ()):
        value = object_or_empty(choice).get("avg_decoded_tokens_per_iter")
        if value is not None:
            return Acceptance(SOURCE, acceptance_length=number(value, f"choices[{n}].avg_decoded_tokens_per_iter"))
    return None


ENGINE = Engine(
    "tensorrt-llm", owned_by=("tensorrt_llm", "trtllm", "tensorrt-llm"), acceptance_source=SOURCE,
    note="tokens per decoding iteration (an acceptance length)",
    readers=((SOURCE, from_choices),),
    length_phrase="per decoding iteration (mean per request)",
)
