"""Synthetic run directories with known answers, written through the real RunWriter.

Every request of a variant generates `new_tokens` tokens; a variant's decode speed per
prompt is planted (`speeds()` makes base × factor with small multiplicative noise), and
its rounds follow a cycled pattern of accepted drafts, so acceptance length, per-position
acceptance, cache hit rate and outputs are all known in advance:

    write_run(tmp / "base", [Variant("ar", speeds(8)), Variant("sd", speeds(8, factor=1.5),
                                                             accepted=(3,), k=4)])
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ssdbench.records.writer import RunWriter

SUITE = "synthetic"
SYNTHETIC_HASH = "a" * 64


@dataclass(frozen=True)
class Variant:
    """One (method, engine) of a synthetic run.

    tokens_per_s: decode tokens/s of each prompt (one value per prompt, or one for all).
    accepted: accepted drafts per round, cycled; empty for ar (one token per round).
    cache_hits: ssd only, cycled over rounds; None writes null (not ssd).
    output_offset: added to every output token id (non-zero: outputs differ from ar's).
    """

    method: str
    tokens_per_s: Sequence[float] | float = 100.0
    engine: str = "native"
    accepted: Sequence[int] = ()
    k: int = 4
    cache_hits: Sequence[bool] | None = None
    output_offset: int = 0


def speeds(num_prompts: int, *, base: float = 100.0, factor: float = 1.0, noise_pct: float = 0.5,
           seed: int = 0) -> list[float]:
    """Per-prompt tokens/s: base (varied over prompts) × factor × (1 + noise), reproducibly.

    The base speeds depend on `num_prompts` only, so two calls with the same base and different
    factors are paired prompt by prompt: the planted per-prompt ratio is factor × noise.
    """
    prompt_speed = base * np.linspace(0.8, 1.2, num_prompts)
    noise = np.random.default_rng(seed).normal(0.0, noise_pct / 100, num_prompts)
    return [float(x) for x in prompt_speed * factor * (1 + noise)]


def base_manifest(**overrides) -> dict:
    """A manifest with everything compare checks for fairness; overrides merge in deeply."""
    manifest = {
        "config": {"dtype": "float32", "temperature": 0.0, "seed": 0, "k": 4, "suite": SUITE},
        "suite": {"name": SUITE, "sha256": "5" * 64},
        "attention_backend": "sdpa",
        "kernels": {"target": {"linear": "matmul", "attention": "sdpa", "dtype": "float32"}},
        "environment": {"cpu": {"model": "Synthetic CPU"}, "gpus": {"available": False}},
        "model_hashes": {"target": {"model.safetensors": SYNTHETIC_HASH}},
    }
    return _merge(manifest, overrides)


def _merge(base: dict, extra: Mapping) -> dict:
    merged = copy.deepcopy(base)
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _rounds(variant: Variant, num_decode: int) -> list[tuple[int, int, int]]:
    """(proposed, accepted, emitted) per round until `num_decode` tokens are committed."""
    pattern = list(variant.accepted) or [0]
    proposed = variant.k if variant.accepted else 0
    rounds, done = [], 0
    while done < num_decode:
        accepted = pattern[len(rounds) % len(pattern)]
        emitted = min(accepted + 1, num_decode - done)
        rounds.append((proposed, accepted, emitted))
        done += emitted
    return rounds


class _Columns(dict):
    def add(self, **values) -> None:
        for name, value in values.items():
            self.setdefault(name, []).append(value)


def _add_request(steps: _Columns, requests: _Columns, key: dict, variant: Variant, speed: float, *,
                 prompt_idx: int, new_tokens: int, temperature: float, seed: int) -> None:
    rounds = _rounds(variant, new_tokens - 1)
    decode_ms = (new_tokens - 1) / speed * 1e3
    step_ms = decode_ms / len(rounds)
    for i, (proposed, accepted, emitted) in enumerate(rounds):
        hit = None if variant.cache_hits is None else bool(variant.cache_hits[i % len(variant.cache_hits)])
        steps.add(**key, round=i, batch_size=1, row=0, proposed=proposed, accepted=accepted, emitted=emitted,
                  bonus_token=7, cache_hit=hit, backup=None if hit in (None, True) else "jit",
                  fan_out_total=None if hit is None else 8, acceptance="exact", counted_by="ssdbench", t_start_ns=1_000_000 * i, draft_ms=0.1 * proposed,
                  verify_ms=step_ms * 0.8, wait_ms=0.0, sample_ms=0.05, step_ms=step_ms)
    outputs = [(prompt_idx * 31 + j + variant.output_offset) % 1000 for j in range(new_tokens)]
    requests.add(**key, batch_size=1, seed=seed, temperature=temperature, prompt_tokens=5, new_tokens=new_tokens,
                 ttft_ms=10.0 + prompt_idx, decode_ms=decode_ms, tpot_ms=decode_ms / (new_tokens - 1),
                 decode_tokens_per_s=speed, rounds=len(rounds), finish_reason="length",
                 prompt_token_ids=[1, 2, 3, 4, 5], output_token_ids=outputs)


def write_run(path: str | Path, variants: Sequence[Variant], *, num_prompts: int = 8, new_tokens: int = 17,
              temperature: float = 0.0, seed: int = 0, manifest: Mapping | None = None,
              run_id: str | None = None) -> Path:
    """A complete run directory at `path`, one request per (variant, prompt)."""
    path = Path(path)
    steps, requests = _Columns(), _Columns()
    idx = 0
    for variant in variants:
        tokens_per_s = variant.tokens_per_s
        per_prompt = [tokens_per_s] * num_prompts if np.isscalar(tokens_per_s) else list(tokens_per_s)
        assert len(per_prompt) == num_prompts, "one speed per prompt"
        for p, speed in enumerate(per_prompt):
            key = {"run_id": run_id or path.name, "method": variant.method, "engine": variant.engine,
                   "suite": SUITE, "prompt_id": f"{SUITE}/p{p}", "request_idx": idx, "repeat": 0}
            _add_request(steps, requests, key, variant, float(speed), prompt_idx=p, new_tokens=new_tokens,
                         temperature=temperature, seed=seed + p)
            idx += 1
    settings = {"config": {"temperature": temperature, "seed": seed}}
    writer = RunWriter.create(path, run_id or path.name, base_manifest(**_merge(settings, manifest or {})))
    writer.finish(steps, requests, [])
    return path
