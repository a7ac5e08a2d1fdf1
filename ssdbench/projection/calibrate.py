"""A short calibration, apart from the decode: what one forward costs, by tokens per forward.

The prediction of `projection.predict` must not be fed the rounds it predicts. So after the
run, on the same placement and threads, the target's forward is timed over n = 1..K+1
tokens at the run's typical context, and the in-process draft's one-token step likewise.
Medians of a few repeats; each forward rewrites the same cache slots, so the context stays put.
"""

from __future__ import annotations

import statistics
import time

import torch

from ssdbench.decoding.ragged import forward_chunks

CALIBRATION_REPEATS = 5


def forward_ms(model, prompt: list[int], *, num_tokens: int, repeats: int = CALIBRATION_REPEATS) -> float:
    """Median wall time (ms) of one forward over `num_tokens` tokens appended after `prompt`."""
    tokens = [prompt[-1]] * num_tokens
    times = []
    for _ in range(repeats + 1):  # the first call of a shape pays set-up: not counted
        start = time.perf_counter_ns()
        with torch.inference_mode():
            logits = forward_chunks(model, [tokens], [len(prompt)])  # [1, n, V]
        float(logits[0, -1, 0])  # a device sync, so the time covers the whole forward
        times.append((time.perf_counter_ns() - start) / 1e6)
    return statistics.median(times[1:])


def prefilled(model, prompt: list[int], *, extra: int):
    """`model` with `prompt` in its cache and room for `extra` more tokens."""
    model.allocate(1, len(prompt) + extra)
    with torch.inference_mode():
        forward_chunks(model, [prompt], [0])
    return model


def calibrate(target, draft, prompt: list[int], *, k: int, repeats: int = CALIBRATION_REPEATS) -> dict:
    """Target forward ms for n = 1..K+1 tokens and the draft's one-token step, at `len(prompt)` context."""
    target = prefilled(target, prompt, extra=k + 1)
    result = {"context_tokens": len(prompt), "repeats": repeats,
              "target_forward_ms": {str(n): forward_ms(target, prompt, num_tokens=n, repeats=repeats)
                                    for n in range(1, k + 2)}}
    if draft is not None:
        draft = prefilled(draft, prompt, extra=k + 1)
        result["draft_step_ms"] = forward_ms(draft, prompt, num_tokens=1, repeats=repeats)
    return result
