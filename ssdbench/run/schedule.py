"""The order in which a run's units (one variant on one batch of requests) are decoded.

`interleaved` (the default) runs every variant on a batch of prompts before moving to the
next batch, so load drift during a run touches all methods alike and paired speedups stay
fair; `grouped` runs all of one variant, then the next.
"""

from __future__ import annotations

from dataclasses import dataclass

ORDERS = ("interleaved", "grouped")


@dataclass(frozen=True)
class Unit:
    variant: tuple[str, str]  # (method, engine)
    repeat: int
    request_idx: tuple[int, ...]  # one batch


def batches(num_requests: int, batch_size: int) -> list[tuple[int, ...]]:
    return [tuple(range(s, min(s + batch_size, num_requests))) for s in range(0, num_requests, batch_size)]


def schedule(variants: list[tuple[str, str]], num_requests: int, *, batch_size: int, repeats: int,
             order: str) -> list[Unit]:
    chunks = batches(num_requests, batch_size)
    if order == "grouped":
        return [Unit(v, r, c) for v in variants for r in range(repeats) for c in chunks]
    return [Unit(v, r, c) for r in range(repeats) for c in chunks for v in variants]
