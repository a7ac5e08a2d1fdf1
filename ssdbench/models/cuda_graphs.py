"""CUDA graphs for the native model's repeated steps (`--cuda-graphs on|off|auto`).

A 1B-class draft's decode step is hundreds of small kernels, each launched from Python;
on a GPU that launch time, not the weights' reads, sets the step time. A CUDA graph records
one step's kernels once and replays them with a single launch. Replaying needs the same
shapes and buffers every time, so the model runs with `static_shapes` (attention over the
whole cache, the mask built on the device, no value read back to the host) and the graphed
call copies its inputs into buffers owned by the graph.

`GraphedModel` wraps a `NativeCausalLM` and keeps one graph per (rows, tokens) shape of a
plain step — a 1-token decode, a K+1-token verify, a tree step of a fixed width — captured on
its first call. Calls with a custom mask, selected logits or hidden states, and prefills
(many tokens, each prompt a different length) run eagerly, with the same static shapes, so
every call computes the same arithmetic. Graphs are dropped when the cache is reallocated.
"""

from __future__ import annotations

from typing import Any

import torch

from ssdbench.errors import UsageError

CUDA_GRAPH_MODES = ("auto", "on", "off")
MAX_GRAPH_TOKENS = 33  # per row: a verify of up to --k 32; longer steps are prefills, whose shapes do not repeat
WARMUP_CALLS = 3  # on a side stream before capture: lazy initialisations must not be recorded


def uses_cuda_graphs(mode: str, device) -> bool:
    """Whether a model on `device` gets graphs: "auto" on CUDA only; "on" elsewhere is one line."""
    if mode not in CUDA_GRAPH_MODES:
        raise UsageError(f"--cuda-graphs must be one of {', '.join(CUDA_GRAPH_MODES)}, not {mode!r}")
    cuda = torch.device(device).type == "cuda"
    if mode == "on" and not cuda:
        raise UsageError(f"--cuda-graphs on needs a CUDA device; the model runs on {device} (use auto or off)")
    return cuda and mode != "off"


class GraphedModel:
    """A native model whose plain steps replay CUDA graphs; everything else is the model's own."""

    def __init__(self, model) -> None:
        self.model = model
        model.static_shapes = True
        self._graphs: dict[tuple[int, int], _Graph] = {}

    def allocate(self, batch_size: int, max_len: int) -> None:
        self._graphs.clear()  # they point at the old cache's buffers
        self.model.allocate(batch_size, max_len)

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, *, slots: torch.Tensor | None = None,
                attn_mask: torch.Tensor | None = None, logits_at: torch.Tensor | None = None,
                return_hidden: bool = False):
        b, t = tokens.shape
        if attn_mask is not None or logits_at is not None or return_hidden or t > MAX_GRAPH_TOKENS:
            return self.model.forward(tokens, positions, slots=slots, attn_mask=attn_mask, logits_at=logits_at,
                                      return_hidden=return_hidden)
        graph = self._graphs.get((b, t))
        if graph is None:
            graph = self._graphs[(b, t)] = _Graph.capture(self.model, tokens, positions)
        return graph.replay(tokens, positions, positions if slots is None else slots)

    __call__ = forward

    def describe(self) -> dict:
        return {**self.model.describe(), "cuda_graphs": True}

    def kernel_names(self) -> dict:
        return {**self.model.kernel_names(), "cuda_graphs": True}

    @property
    def graph_shapes(self) -> list[tuple[int, int]]:
        """The (rows, tokens) shapes captured so far."""
        return sorted(self._graphs)

    def __getattr__(self, name: str) -> Any:  # shape, device, dtype, copy_slots, cache, ...
        if name.startswith("_") or name == "model":
            raise AttributeError(name)
        return getattr(self.model, name)


class _Graph:
    """One captured step: input buffers, the graph, and the logits buffer it writes."""

    def __init__(self, graph, tokens, positions, slots, logits) -> None:
        self.graph, self.tokens, self.positions, self.slots, self.logits = graph, tokens, positions, slots, logits

    @classmethod
    def capture(cls, model, tokens: torch.Tensor, positions: torch.Tensor) -> _Graph:
        static_tokens, static_positions = tokens.clone(), positions.clone()  # [B, T] each
        static_slots = positions.clone()  # [B, T]
        side = torch.cuda.Stream(device=tokens.device)
        side.wait_stream(torch.cuda.current_stream(tokens.device))
        with torch.cuda.stream(side):  # warm-up writes the cache at these slots: the replay rewrites them
            for _ in range(WARMUP_CALLS):
                model.forward(static_tokens, static_positions, slots=static_slots)
        torch.cuda.current_stream(tokens.device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            logits = model.forward(static_tokens, static_positions, slots=static_slots)  # [B, T, V]
        return cls(graph, static_tokens, static_positions, static_slots, logits)

    def replay(self, tokens: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
        self.tokens.copy_(tokens)
        self.positions.copy_(positions)
        self.slots.copy_(slots)
        self.graph.replay()
        return self.logits.clone()  # the next replay overwrites the buffer
