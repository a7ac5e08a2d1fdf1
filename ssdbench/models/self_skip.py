"""The self-skip draft: the target itself with some decoder layers left out (as in Draft & Verify, SWIFT).

A skipped layer passes the residual stream on unchanged; the draft keeps its own KV cache
for the kept layers only (`build.build_native_model(skip_layers=...)`, docs/DESIGN.md §4.1).
Which layers to skip is either given (`self-skip:3,5,7`) or chosen by a short calibration on
the run's prompts (`self-skip` or `self-skip:auto`, `choose_skipped_layers`):

1. one teacher-forced forward of the full target scores each layer by how little it turns the
   residual stream (mean cosine similarity of the layer's input and output);
2. the n best-scoring layers, for a few n, never the first or the last layer, are candidates;
3. each candidate is run over the same tokens: α = how often its argmax equals the target's;
4. each gets the speedup chain speculative decoding with K draft tokens per round would have if every
   draft token were accepted with probability α and decoding were memory-bound:
   E[tokens per round] = (1 - α^(K+1)) / (1 - α), round cost = 1 + K·c target forwards,
   c = weight bytes the draft reads per forward / the target's;
5. the best predicted speedup wins (ties: fewer layers skipped).

Candidates run through `skipping_view`, the target's own layer objects minus the skipped
ones: the very arithmetic a draft built with `skip_layers` runs, without a copy of the weights.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

import torch
import torch.nn.functional as F

from ssdbench.errors import UsageError
from ssdbench.models.llama import DecoderLayer, NativeCausalLM
from ssdbench.models.build import check_skip_layers, kept_layers

SELF_SKIP = "self-skip"
AUTO = "auto"
CANDIDATE_FRACTIONS = (1 / 8, 1 / 4, 3 / 8, 1 / 2)  # of the layer count: the sizes of skip set tried
MAX_CALIBRATION_TOKENS = 256  # ~6 s on SmolLM2-135M on one CPU core (4 candidates); α moved < 0.01 from 469 tokens


def parse_self_skip(spec: str) -> str | tuple[int, ...]:
    """"self-skip" or "self-skip:auto" -> "auto"; "self-skip:3,5,7" -> (3, 5, 7) (sorted).

    Whether the indices exist is checked when the model is built (`check_skip_layers`).
    """
    name, sep, rest = spec.strip().partition(":")
    if name.strip() != SELF_SKIP:
        raise UsageError(f"not a self-skip draft: {spec!r} (use 'self-skip', 'self-skip:auto' or 'self-skip:3,5,7')")
    rest = rest.strip()
    if not sep or rest == AUTO:
        return AUTO
    items = [item.strip() for item in rest.split(",")]
    if not all(item.isdigit() for item in items):
        raise UsageError(f"bad layer list in {spec!r}: expected 'auto' or layer indices like 'self-skip:3,5,7'")
    layers = [int(item) for item in items]
    if len(set(layers)) != len(layers):
        raise UsageError(f"bad layer list in {spec!r}: a layer is named twice")
    return tuple(sorted(layers))


def skipping_view(model: NativeCausalLM, skip_layers) -> NativeCausalLM:
    """`model` without `skip_layers`, sharing its weights and kernels, with a KV cache of its own
    (call `allocate`). The same layers and arithmetic as `build_native_model(skip_layers=...)`."""
    if model.skipped_layers:
        raise UsageError(f"the model already skips layers {list(model.skipped_layers)}: skip from the full model")
    skip = check_skip_layers(model.shape.num_layers, skip_layers)
    layers = [model.layers[i] for i in kept_layers(model.shape.num_layers, skip)]
    return _view(model, layers, skipped_layers=skip)


def _view(model: NativeCausalLM, layers: list[DecoderLayer], *, skipped_layers: tuple[int, ...]) -> NativeCausalLM:
    return NativeCausalLM(replace(model.shape, num_layers=len(layers)), layers, embed=model.embed, norm=model.norm,
                          lm_head=model.lm_head, backend=model.backend, device=model.device, dtype=model.dtype,
                          weights=model.weights, kernels=model.kernels, skipped_layers=skipped_layers)


@dataclass
class Candidate:
    """One skip set tried by the calibration."""

    layers: tuple[int, ...]
    alpha: float  # greedy agreement with the target, per position
    cost_ratio: float  # c: weight bytes per forward, draft / target
    predicted_speedup: float

    def to_dict(self) -> dict:
        return {"layers": list(self.layers), "alpha": self.alpha, "cost_ratio": self.cost_ratio,
                "predicted_speedup": self.predicted_speedup}


@dataclass
class SkipChoice:
    """The chosen skip set, its numbers, and what else was tried (for the run manifest)."""

    layers: tuple[int, ...]
    alpha: float
    cost_ratio: float
    predicted_speedup: float
    candidates: list[Candidate] = field(default_factory=list)
    layer_scores: list[float] = field(default_factory=list)  # mean cos(input, output) per layer; high = skippable
    k: int = 0  # draft tokens per round it was calibrated for
    tokens: int = 0  # calibration positions
    seconds: float = 0.0

    def to_dict(self) -> dict:
        """JSON-friendly: lists and floats only; k is recorded as "lookahead", the manifest's name from older runs."""
        return {"layers": list(self.layers), "alpha": self.alpha, "cost_ratio": self.cost_ratio,
                "predicted_speedup": self.predicted_speedup, "lookahead": self.k,
                "calibration_tokens": self.tokens, "seconds": round(self.seconds, 3),
                "layer_scores": [round(s, 6) for s in self.layer_scores],
                "candidates": [c.to_dict() for c in self.candidates]}


def predicted_speedup(alpha: float, cost_ratio: float, k: int) -> float:
    """Tokens per round over round cost in target forwards, for chain SD with i.i.d. acceptance α."""
    tokens_per_round = k + 1 if alpha >= 1.0 else (1 - alpha ** (k + 1)) / (1 - alpha)
    return tokens_per_round / (1 + k * cost_ratio)


def candidate_sets(scores: list[float], fractions=CANDIDATE_FRACTIONS) -> list[tuple[int, ...]]:
    """The n best-scoring layers for n = round(f·L) per fraction (distinct, at least 1), never the
    first or the last layer, which turn the residual stream most in practice and feed the lm_head."""
    num_layers = len(scores)
    eligible = sorted(range(1, num_layers - 1), key=lambda i: (-scores[i], i))  # most skippable first
    if not eligible:
        raise UsageError(f"self-skip needs a target of at least 3 layers (this one has {num_layers})")
    sizes = sorted({min(max(1, int(f * num_layers + 0.5)), len(eligible)) for f in fractions})
    return [tuple(sorted(eligible[:n])) for n in sizes]


def choose_skipped_layers(target: NativeCausalLM, sequences, *, k: int,
                          max_tokens: int = MAX_CALIBRATION_TOKENS, fractions=CANDIDATE_FRACTIONS) -> SkipChoice:
    """Pick the layers of `target` the self-skip draft leaves out, from a calibration on
    `sequences` (token id lists, teacher-forced, `max_tokens` in all). See the module docstring."""
    if not isinstance(target, NativeCausalLM):
        raise UsageError("self-skip needs the native engine's target")
    if k < 1:
        raise UsageError(f"k must be at least 1, not {k}")
    started = time.perf_counter()
    batches = _calibration_tokens(sequences, max_tokens, device=target.device)
    scores, target_argmax = _score_layers(target, batches)
    full_bytes = target.weight_bytes_per_forward()
    candidates = []
    for layers in candidate_sets(scores, fractions):
        draft = skipping_view(target, layers)
        alpha = _agreement(draft, batches, target_argmax)
        cost = draft.weight_bytes_per_forward() / full_bytes
        candidates.append(Candidate(layers, alpha, cost, predicted_speedup(alpha, cost, k)))
    best = max(candidates, key=lambda c: (c.predicted_speedup, -len(c.layers)))
    return SkipChoice(best.layers, best.alpha, best.cost_ratio, best.predicted_speedup, candidates=candidates,
                      layer_scores=scores, k=k, tokens=sum(t.shape[1] for t in batches),
                      seconds=time.perf_counter() - started)


def _calibration_tokens(sequences, max_tokens: int, *, device) -> list[torch.Tensor]:
    """The sequences as [1, T] tensors, in order, cut so that they hold `max_tokens` in all."""
    batches, left = [], max_tokens
    for seq in sequences:
        ids = list(seq)[:left]
        if ids:
            batches.append(torch.tensor([ids], dtype=torch.long, device=device))  # [1, T]
            left -= len(ids)
        if left <= 0:
            break
    if not batches:
        raise UsageError("self-skip calibration needs at least one non-empty prompt")
    return batches


def _forward(model: NativeCausalLM, tokens: torch.Tensor) -> torch.Tensor:
    """Teacher-forced logits [1, T, V] of one sequence from position 0, in a fresh cache."""
    t = tokens.shape[1]
    model.allocate(1, t)
    return model.forward(tokens, torch.arange(t, device=tokens.device)[None])  # [1, T, V]


def _score_layers(target: NativeCausalLM, batches: list[torch.Tensor]) -> tuple[list[float], list[torch.Tensor]]:
    """(mean cosine similarity of each layer's input and output over all positions, the target's
    argmax [1, T] per sequence), from one forward of the full model per sequence."""
    recorder = _ResidualRecorder(target)
    sums = torch.zeros(target.shape.num_layers, dtype=torch.float64)  # [L]
    argmaxes, positions = [], 0
    for tokens in batches:
        recorder.clear()
        argmaxes.append(_forward(recorder.model, tokens).argmax(-1))  # [1, T]
        sums += recorder.cosines(F.embedding(tokens, target.embed)).sum(-1).double().cpu()
        positions += tokens.shape[1]
    return (sums / positions).tolist(), argmaxes


def _agreement(draft: NativeCausalLM, batches: list[torch.Tensor], target_argmax: list[torch.Tensor]) -> float:
    """Fraction of positions where the draft's argmax is the target's."""
    same = sum(int((_forward(draft, tokens).argmax(-1) == want).sum()) for tokens, want in zip(batches, target_argmax))
    return same / sum(t.shape[1] for t in batches)


class _ResidualRecorder:
    """A view of the target whose o and down projections record their outputs: each layer adds
    exactly those two to the residual stream, so the layers' inputs and outputs can be rebuilt
    from the embedding without touching `forward`."""

    def __init__(self, target: NativeCausalLM) -> None:
        self.added: list[list[torch.Tensor]] = [[] for _ in target.layers]  # per layer: [attn out, mlp out]
        layers = [replace(layer, o=self._recording(i, layer.o), down=self._recording(i, layer.down))
                  for i, layer in enumerate(target.layers)]
        self.model = _view(target, layers, skipped_layers=())

    def _recording(self, i: int, project):
        def run(x: torch.Tensor) -> torch.Tensor:
            out = project(x)  # [B, T, hidden]
            self.added[i].append(out)
            return out

        return run

    def clear(self) -> None:
        for added in self.added:
            added.clear()

    def cosines(self, x: torch.Tensor) -> torch.Tensor:
        """Cosine similarity [L, T] of each layer's input and output for the forward just run,
        whose embedded tokens are x [1, T, hidden]."""
        rows = []
        for added in self.added:
            if len(added) != 2:
                raise RuntimeError(f"expected one attention and one MLP output per layer, got {len(added)}")
            out = x + added[0] + added[1]  # the forward's own sums, in its order: x + attn, then + mlp
            rows.append(F.cosine_similarity(x.float(), out.float(), dim=-1)[0])  # [T]
            x = out
        return torch.stack(rows)  # [L, T]
