"""CUDA graphs for the native model's repeated steps (`--cuda-graphs on|off|auto`).

A 1B-class draft's decode step is hundreds of small kernels, each launched from Python;
on a GPU that launch time, not the weights' reads, sets the step time. A CUDA graph records
one step's kernels once and replays them with a single launch. Replaying needs the same
shapes and buffers every time, so the model runs with `static_shapes` (attention over the
whole cache, the mask built on the device, no value read back to the host) and the graphed
call copies its inputs into buffers owned by the graph.

`GraphedModel` wraps a `NativeCausalLM` and keeps one graph per (rows, tokens, masked) shape
of a step — a 1-token decode, a K+1-token verify or glue, and ssd's tree steps, whose mask is
one more input buffer. Every such shape of a row count is captured when that row count's cache
is first allocated (a shape first met later is captured then). Calls with selected logits or
hidden states, plain steps longer than `max_tokens` (prefills: each prompt a different length)
and trees wider than MAX_GRAPH_TOKENS run eagerly, with the same static shapes, so every call
computes the same arithmetic.

A graph reads the buffers it was captured on, so the cache outlives batches: every batch of a
run whose models replay graphs asks for the same capacity (`DecodeSettings.cache_capacity`), a
batch of fewer rows (the last one) takes the first rows of the largest batch's cache, and
`allocate` zeroes in place. The run's warm-up, which allocates each batch size first, therefore
captures what its timed batches replay; only a new capacity or a larger batch re-allocates and
drops the graphs.
"""

from __future__ import annotations

from typing import Any

import torch

from ssdbench.errors import UsageError

CUDA_GRAPH_MODES = ("auto", "on", "off")
MAX_GRAPH_TOKENS = 33  # per row: a verify of up to --k 32, or a tree of up to 33 branches
WARMUP_CALLS = 3  # on a side stream before capture: lazy initialisations must not be recorded


def uses_cuda_graphs(mode: str, device) -> bool:
    """Whether a model on `device` gets graphs: "auto" on CUDA only; "on" elsewhere is one line."""
    if mode not in CUDA_GRAPH_MODES:
        raise UsageError(f"--cuda-graphs must be one of {', '.join(CUDA_GRAPH_MODES)}, not {mode!r}")
    cuda = torch.device(device).type == "cuda"
    if mode == "on" and not cuda:
        raise UsageError(f"--cuda-graphs on needs a CUDA device; the model runs on {device} (use auto or off)")
    return cuda and mode != "off"


def checked_mode(mode: str) -> str:
    """A --cuda-graphs mode the plan has checked against every role's device, for one model: "on"
    then means "wherever the model is on CUDA" (a CPU role of the same run gets none)."""
    return "auto" if mode == "on" else mode


def unwrapped(model):
    """The native model under a GraphedModel (itself otherwise): for one-off calls that should
    neither capture graphs nor touch the graphs' cache."""
    return model.model if isinstance(model, GraphedModel) else model


class GraphedModel:
    """A native model whose repeated steps replay CUDA graphs; everything else is the model's own."""

    def __init__(self, model, *, max_tokens: int = MAX_GRAPH_TOKENS, tree_widths: int = 0) -> None:
        self.model = model
        self.max_tokens = max_tokens  # the longest plain step graphed (a K+1-token verify)
        self.tree_widths = min(tree_widths, MAX_GRAPH_TOKENS)  # tree steps captured up front (ssd's draft)
        model.static_shapes = True
        self._graphs: dict[tuple[int, int, bool], _Graph] = {}  # (rows, tokens, masked)
        self._prepared: set[int] = set()  # row counts whose steps were all captured at allocation
        self._storage = model.cache  # the largest batch's StaticKVCache; smaller batches take its first rows
        self._stream = None  # the capture stream, on the model's device (made at the first capture)
        self._pool = None  # one memory pool for every graph on this storage (made at the first capture)

    def allocate(self, batch_size: int, max_len: int) -> None:
        """A zeroed cache of `batch_size` rows and `max_len` slots; on the graphs' own buffers where they fit."""
        storage = self._storage
        if storage is not None and storage.max_len == max_len and storage.batch_size >= batch_size:
            self.model.cache = storage.first_rows(batch_size)
        else:
            self._graphs.clear()  # they point at the old cache's buffers
            self._prepared.clear()
            self._pool = None
            self._storage = self.model.cache = None  # freed before the new one is made
            self.model.allocate(batch_size, max_len)
            self._storage = self.model.cache
        if batch_size not in self._prepared:
            self._capture_steps(batch_size)
            self._prepared.add(batch_size)
        self.model.cache.clear()

    def _capture_steps(self, rows: int) -> None:
        """Capture every step shape this row count can take, now, at allocation (which the run's
        warm-up does first for each batch size): a capture made at first use would land inside a
        timed round. Plain steps of 1..max_tokens tokens, tree steps of 1..tree_widths branches
        (each query seeing its own slot); they write the cache, which `allocate` then zeroes.
        Off CUDA these are eager calls: the shapes are checked, nothing is captured."""
        device, slots_max = self.model.device, self.model.cache.max_len
        for t in range(1, min(self.max_tokens, slots_max) + 1):
            positions = torch.arange(t, device=device).expand(rows, t)  # [rows, t]
            self.forward(torch.zeros(rows, t, dtype=torch.int64, device=device), positions)
        for n in range(1, min(self.tree_widths, slots_max) + 1):
            positions = torch.arange(n, device=device).expand(rows, n)  # [rows, n]
            own = torch.arange(slots_max, device=device) == positions[..., None]  # [rows, n, S]
            self.forward(torch.zeros(rows, n, dtype=torch.int64, device=device), positions, slots=positions,
                         attn_mask=own)

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, *, slots: torch.Tensor | None = None,
                attn_mask: torch.Tensor | None = None, logits_at: torch.Tensor | None = None,
                return_hidden: bool = False):
        b, t = tokens.shape
        masked = attn_mask is not None
        longest = MAX_GRAPH_TOKENS if masked else self.max_tokens  # a tree step is as wide as its branches
        eager = logits_at is not None or return_hidden or t > longest
        if eager or tokens.device.type != "cuda":  # off CUDA (tests) the static shapes and shared cache, no graph
            return self.model.forward(tokens, positions, slots=slots, attn_mask=attn_mask, logits_at=logits_at,
                                      return_hidden=return_hidden)
        slots = positions if slots is None else slots
        graph = self._graphs.get((b, t, masked))
        if graph is None:
            if self._stream is None:
                self._stream = torch.cuda.Stream(device=tokens.device)
            if self._pool is None:
                self._pool = torch.cuda.graph_pool_handle()
            graph = self._graphs[(b, t, masked)] = _Graph.capture(self.model, tokens, positions, slots, attn_mask,
                                                                  stream=self._stream, pool=self._pool)
        return graph.replay(tokens, positions, slots, attn_mask)

    __call__ = forward

    def describe(self) -> dict:
        return {**self.model.describe(), "cuda_graphs": True}

    def kernel_names(self) -> dict:
        return {**self.model.kernel_names(), "cuda_graphs": True}

    @property
    def graph_shapes(self) -> list[tuple[int, int, bool]]:
        """The (rows, tokens, masked) shapes captured so far."""
        return sorted(self._graphs)

    def __getattr__(self, name: str) -> Any:  # shape, device, dtype, copy_slots, cache, ...
        if name.startswith("_") or name == "model":
            raise AttributeError(name)
        return getattr(self.model, name)


class _Graph:
    """One captured step: input buffers (the mask only for a masked step), the graph, and the logits buffer it writes."""

    def __init__(self, graph, tokens, positions, slots, mask, logits) -> None:
        self.graph, self.tokens, self.positions, self.slots, self.mask = graph, tokens, positions, slots, mask
        self.logits = logits

    @classmethod
    def capture(cls, model, tokens: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor,
                mask: torch.Tensor | None, *, stream: torch.cuda.Stream, pool) -> _Graph:
        """Warm up on `stream`, then capture one forward on it. The model's device is made current
        throughout: a capture records only the current device's work, and torch.cuda.graph's own
        default stream would be on whichever device first captured anything in this process.

        The graphs of one storage share `pool`: they replay one at a time on one stream, each one's
        logits stay allocated (held here) and are cloned at once after replay, so only their dead
        intermediates are shared, and memory grows by the logits of each shape, not its whole peak."""
        static_tokens, static_positions, static_slots = tokens.clone(), positions.clone(), slots.clone()  # [B, T]
        static_mask = None if mask is None else mask.clone()  # [B, T, S_max] bool
        with torch.cuda.device(tokens.device):
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):  # warm-up writes the cache at these slots: the replay rewrites them
                for _ in range(WARMUP_CALLS):
                    model.forward(static_tokens, static_positions, slots=static_slots, attn_mask=static_mask)
            torch.cuda.current_stream().wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool, stream=stream):
                logits = model.forward(static_tokens, static_positions, slots=static_slots,
                                       attn_mask=static_mask)  # [B, T, V]
        return cls(graph, static_tokens, static_positions, static_slots, static_mask, logits)

    def replay(self, tokens: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor,
               mask: torch.Tensor | None) -> torch.Tensor:
        with torch.cuda.device(self.tokens.device):  # the graph launches on the current device's stream
            self.tokens.copy_(tokens)
            self.positions.copy_(positions)
            self.slots.copy_(slots)
            if self.mask is not None:
                self.mask.copy_(mask)
            self.graph.replay()
            return self.logits.clone()  # the next replay overwrites the buffer
