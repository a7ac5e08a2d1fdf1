"""What users already run: transformers' `generate`, plain and assisted, timed like our methods.

These run one request at a time (transformers' streamer, which gives us the first-token
time, supports batch 1 only); the run records that batch size for them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch


@dataclass
class GenerateResult:
    output_ids: list[int]
    start_ns: int
    first_token_ns: int
    end_ns: int


class _FirstTokenClock:
    """A transformers streamer that only notes when the first new token arrived."""

    def __init__(self) -> None:
        self.calls = 0
        self.first_token_ns = 0

    def put(self, value) -> None:
        self.calls += 1
        if self.calls == 2:  # the first call carries the prompt
            self.first_token_ns = time.perf_counter_ns()

    def end(self) -> None:
        pass


def hf_generate(
    model,
    prompt_ids: list[int],
    *,
    max_new_tokens: int,
    temperature: float,
    top_p: float,
    ignore_eos: bool,
    seed: int,
    assistant=None,
    prompt_lookup_tokens: int | None = None,
    lookahead: int = 4,
) -> GenerateResult:
    """transformers' generate on one prompt; `assistant` (a model) or prompt lookup makes it assisted."""
    device = next(model.parameters()).device
    input_ids = torch.tensor([prompt_ids], dtype=torch.int64, device=device)  # [1, T]
    kwargs = _sampling_kwargs(temperature, top_p)
    if ignore_eos:
        kwargs["min_new_tokens"] = max_new_tokens
    if assistant is not None:
        assistant.generation_config.num_assistant_tokens = lookahead
        assistant.generation_config.num_assistant_tokens_schedule = "constant"
        assistant.generation_config.assistant_confidence_threshold = 0.0
        kwargs["assistant_model"] = assistant
    if prompt_lookup_tokens is not None:
        kwargs["prompt_lookup_num_tokens"] = prompt_lookup_tokens
    torch.manual_seed(seed)  # transformers' sampling draws from the global generator
    clock = _FirstTokenClock()
    start_ns = time.perf_counter_ns()
    with torch.inference_mode():
        out = model.generate(
            input_ids, attention_mask=torch.ones_like(input_ids), max_new_tokens=max_new_tokens,
            streamer=clock, pad_token_id=model.generation_config.eos_token_id, **kwargs,
        )
    end_ns = time.perf_counter_ns()
    return GenerateResult(out[0, len(prompt_ids):].tolist(), start_ns, clock.first_token_ns or end_ns, end_ns)


def _sampling_kwargs(temperature: float, top_p: float) -> dict:
    if temperature == 0:
        return {"do_sample": False, "temperature": None, "top_p": None, "top_k": None}
    return {"do_sample": True, "temperature": temperature, "top_p": top_p, "top_k": 0}
