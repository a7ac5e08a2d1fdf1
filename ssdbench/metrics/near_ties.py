"""Why a greedy output differs from ar's: a near-tie the run's dtype cannot resolve, or a real difference.

Greedy sd and ssd emit ar's tokens exactly when every logit they compare is computed alike. On a
GPU in bf16, a K+1-token verify and a one-token step run different kernels, whose roundings differ
by a few units in the last place; where the target's two best tokens are that close, the argmax
may flip and the outputs part from there on. Such a flip says nothing about the acceptance rule.

For each request whose output differs from ar's, the target is run once over the prompt and ar's
tokens up to the first difference; the margin there between ar's token and the other token is
compared with the dtype's resolution at that logit (docs/DESIGN.md §7.1a): a margin of at most
NEAR_TIE_ULPS units of the dtype's epsilon, times the logit's size and the square root of the
model's depth, is a near-tie. Anything wider is a real difference, reported as such. A difference at a near-tie is reported, never hidden:
the identity figure stays what it measured.

A serving engine's departures are bounded with the dtype the server says it runs (`endpoints/dtypes.py`), where
that is wider than the run's own: a bf16 server's near-ties are bf16's. Where the server says no float dtype
(unknown, or quantised weights), no bound applies and the departure is unverifiable (`near_tie` None), never
"not a near-tie" on the run's fp32 bound.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import math

import torch

from ssdbench.metrics.summary import variant_label

NEAR_TIE_ULPS = 8  # margins within 8 epsilons of the logit's size per sqrt(layer): fp32 1e-6 relative for one layer


@dataclass(frozen=True)
class Divergence:
    """Where one request's output first departs from ar's, and how close the target's call was there."""

    label: str
    prompt_id: str
    repeat: int
    position: int  # index into the new tokens
    ar_token: int
    token: int
    margin: float  # target logit of ar's token minus that of the other token, on ar's prefix
    tolerance: float | None  # None: no dtype bounds this variant's roundings (a server that says none)

    @property
    def near_tie(self) -> bool | None:
        """Whether the margin is within the tolerance; None where there is no tolerance (unverifiable)."""
        return None if self.tolerance is None else abs(self.margin) <= self.tolerance

    def describe(self) -> dict:
        return {**asdict(self), "near_tie": self.near_tie}


def first_difference(a: Sequence[int], b: Sequence[int]) -> int | None:
    """The first index where a and b differ (a prefix ends where the shorter does); None if equal."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def tie_tolerance(dtype: torch.dtype, *logits: float, layers: int = 1) -> float:
    """The widest margin the dtype's rounding can explain at logits of this size, after `layers` decoder
    layers. Each layer adds its own rounding, and two summation orders' errors grow through the residual
    stream like a random walk, by the square root of the depth: on SmolLM2's 30 layers, fused gemv steps
    against MKL's sgemm moved a margin between the top token and a runner-up by up to 1.9 times one
    layer's tolerance in fp32 (tests/metrics/test_near_ties.py measures it on the shipped model)."""
    return NEAR_TIE_ULPS * torch.finfo(dtype).eps * max(1.0, *(abs(v) for v in logits)) * math.sqrt(max(1, layers))


def next_token_logits(model, token_ids: Sequence[int]) -> torch.Tensor:
    """The model's fp32 logits [V] for the token after token_ids (one forward over them, batch 1)."""
    device = getattr(model, "device", "cpu")
    tokens = torch.tensor([list(token_ids)], device=device)  # [1, T]
    model.allocate(1, tokens.shape[1] + 1)
    return model.forward(tokens, torch.arange(tokens.shape[1], device=device).unsqueeze(0))[0, -1].float().cpu()


def classify(label: str, request: dict, ar_output: Sequence[int], logits_of: Callable[[list[int]], torch.Tensor],
             dtype: torch.dtype | None, *, layers: int = 1) -> Divergence | None:
    """The request's first departure from ar's output, or None when there is none (or one output
    only stopped earlier: no token was chosen differently). dtype None: unverifiable, no tolerance."""
    output = list(request["output_token_ids"])
    at = first_difference(output, ar_output)
    if at is None or at >= min(len(output), len(ar_output)):
        return None
    logits = logits_of(list(request["prompt_token_ids"]) + list(ar_output[:at]))  # [V]
    ours, theirs = float(logits[ar_output[at]]), float(logits[output[at]])
    return Divergence(label=label, prompt_id=str(request["prompt_id"]), repeat=int(request["repeat"]), position=at,
                      ar_token=int(ar_output[at]), token=int(output[at]), margin=ours - theirs,
                      tolerance=None if dtype is None else tie_tolerance(dtype, ours, theirs, layers=layers))


def greedy_divergences(requests: dict[str, list], logits_of: Callable[[list[int]], torch.Tensor],
                       dtype: torch.dtype, *, layers: int = 1,
                       dtype_of: Callable[[str], torch.dtype | None] | None = None) -> list[Divergence]:
    """Every request of a greedy run whose output departs from ar's on the same prompt and repeat.

    requests: the recorder's columns (labelled as the summary labels them).
    Baselines and variants alike are checked; ar itself is the reference. dtype_of: a variant's own dtype
    where it is not the run's (a serving engine's; None where it has none), by label.
    """
    rows = [dict(zip(requests, values)) for values in zip(*requests.values())]
    for row in rows:
        row["label"] = variant_label(row["method"], row["engine"])
    ar = {(r["suite"], r["prompt_id"], r["repeat"]): list(r["output_token_ids"]) for r in rows if r["label"] == "ar"}
    found = []
    for row in rows:
        reference = ar.get((row["suite"], row["prompt_id"], row["repeat"]))
        if row["label"] == "ar" or reference is None:
            continue
        own = dtype if dtype_of is None else dtype_of(row["label"])
        if (divergence := classify(row["label"], row, reference, logits_of, own, layers=layers)) is not None:
            found.append(divergence)
    return found
