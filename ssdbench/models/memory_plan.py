"""What a run will hold in memory and how far its positions reach, worked out before anything is allocated.

Pure functions of a model's shape and the run's settings, so they can be checked against
published shapes without loading anything. The numbers are estimates of the large
buffers (weights, static KV caches, the biggest forward's activations and logits), not of
every small tensor: a run they refuse would certainly not fit, one they accept may still
be tight.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # shapes are only read here; importing them would pull torch into `--help`
    from ssdbench.models.shape import ModelShape

MAX_K = 32  # draft tokens per round (K): past this the draft's sequential steps dominate every round
MAX_TREE_TOKENS = 4096  # ssd: branches (fan-out budget) x K draft tokens per row per round
CPU_CHECKPOINT_BYTES = 4  # the fp32 state dict a native model is built from stays loaded on the host
ATTENTION_SCORE_BYTES = 4  # scores are kept in fp32 by the reference attention


@dataclass(frozen=True)
class Lengths:
    """The token counts a batch's caches and forwards are sized by."""

    batch_size: int
    prompt_tokens: int  # the longest prompt
    max_new_tokens: int
    k: int  # draft tokens per round: a run's caches hold K slots past the new tokens, whatever the method
    tree_tokens: int = 0  # ssd's draft: fan-out budget x K extra slots per row

    @property
    def num_slots(self) -> int:
        """Cache capacity a model of the batch allocates (as decoding.batch.new_batch and the speculator do)."""
        base = self.prompt_tokens + self.max_new_tokens + self.k + 2
        return base + (self.k + 2 + self.tree_tokens + 1 if self.tree_tokens else 0)  # + the top-up's scratch slot

    @property
    def step_tokens(self) -> int:
        """Tokens per row of a decode forward: a verify over K+1, or one step of every tree branch."""
        return max(self.k + 1, self.tree_tokens // max(self.k, 1))


@dataclass(frozen=True)
class RoleNeed:
    """Bytes one model of the run holds on its device."""

    role: str
    device: str
    weights: int
    kv_cache: int
    activations: int

    @property
    def total(self) -> int:
        return self.weights + self.kv_cache + self.activations

    def describe(self) -> str:
        return (f"{self.role} {mib(self.total)} = weights {mib(self.weights)} + KV cache {mib(self.kv_cache)} + "
                f"activations {mib(self.activations)}")


def mib(num_bytes: float) -> str:
    return f"{num_bytes / 2**20:,.0f} MiB"


def weight_bytes(shape: ModelShape, *, itemsize: int, is_int8: bool = False) -> int:
    """The model as the engine holds it: dense in `itemsize` bytes, or int8 linears (embedding and norms kept)."""
    if not is_int8:
        return shape.num_params() * itemsize
    embed = shape.vocab * shape.hidden
    linears = shape.num_params() - embed * (1 if shape.tie_word_embeddings else 2)
    head = shape.vocab * shape.hidden  # the lm head is an int8 linear even when tied
    return (linears + head) * 1 + embed * itemsize


def kv_cache_bytes(shape: ModelShape, *, batch_size: int, num_slots: int, itemsize: int,
                   key_blocks: bool = False) -> int:
    """K and V [L, B, Hkv, S, D], plus the RoPE tables [S, D] cos and sin; with `key_blocks` the keys once more
    (the fused CPU step's transposed blocks, kv_cache.py)."""
    per_slot = (3 if key_blocks else 2) * shape.num_layers * shape.num_kv_heads * shape.head_dim * batch_size
    return (per_slot + 2 * shape.head_dim) * num_slots * itemsize


def activation_bytes(shape: ModelShape, *, batch_size: int, num_tokens: int, span: int, itemsize: int) -> int:
    """Peak transient bytes of one forward over [B, T] tokens attending to `span` slots: the layer's
    largest intermediates, one head-set of attention scores, and the fp32 logits [B, T, V]."""
    q, kv = shape.num_heads * shape.head_dim, shape.num_kv_heads * shape.head_dim
    per_token = (3 * shape.hidden + q + 2 * kv + 3 * shape.intermediate) * itemsize + 4 * shape.vocab
    scores = shape.num_heads * span * ATTENTION_SCORE_BYTES
    return batch_size * num_tokens * (per_token + scores)


def role_need(role: str, device: str, shape: ModelShape, lengths: Lengths, *, itemsize: int,
              is_int8: bool = False, num_copies: int = 1) -> RoleNeed:
    """One model's bytes: `num_copies` builds of its weights (one per engine), each with its cache."""
    weights = weight_bytes(shape, itemsize=itemsize, is_int8=is_int8) * num_copies
    if device.startswith("cpu"):
        weights += shape.num_params() * CPU_CHECKPOINT_BYTES
    slots = lengths.num_slots
    fused = device.startswith("cpu") and itemsize == 4  # where the fused step may run: its key blocks too
    kv = kv_cache_bytes(shape, batch_size=lengths.batch_size, num_slots=slots, itemsize=itemsize,
                        key_blocks=fused) * num_copies
    prefill = activation_bytes(shape, batch_size=lengths.batch_size, num_tokens=lengths.prompt_tokens,
                               span=lengths.prompt_tokens, itemsize=itemsize)
    step = activation_bytes(shape, batch_size=lengths.batch_size, num_tokens=lengths.step_tokens, span=slots,
                            itemsize=itemsize)
    acts = max(prefill, step)  # one forward at a time
    return RoleNeed(role, device, weights, kv, acts)


def tensor_parallel_needs(shape: ModelShape, lengths: Lengths, *, devices: list[str], itemsize: int) -> list[RoleNeed]:
    """The target split over len(devices) ranks (tensor_parallel.py), one need per rank: its shard
    of the layers and KV cache, and the embedding, norms and lm_head whole (each rank reads the
    checkpoint a tensor at a time and keeps only its slices)."""
    shard = shape.tensor_parallel_shard(len(devices))
    return [role_need(f"target rank {rank}", device, shard, lengths, itemsize=itemsize)
            for rank, device in enumerate(devices)]


def needs_by_device(needs: list[RoleNeed]) -> dict[str, list[RoleNeed]]:
    """Roles grouped by the memory they share: every cpu placement is one host, and `cuda` is `cuda:0`."""
    grouped: dict[str, list[RoleNeed]] = {}
    for need in needs:
        grouped.setdefault(memory_domain(need.device), []).append(need)
    return grouped


def memory_domain(device: str) -> str:
    """The memory a placement draws on: "cpu" for any cpu placement, "cuda:N" for a GPU (plain "cuda" is cuda:0)."""
    if device.startswith("cpu"):
        return "cpu"
    if device == "cuda":
        return "cuda:0"
    return device


def shortfall(needs: list[RoleNeed], available: Callable[[str], int | None]) -> tuple[str, int, int] | None:
    """(device, bytes needed, bytes available) of the first device the roles do not fit; None if all fit."""
    for device, roles in needs_by_device(needs).items():
        free = available(device)
        total = sum(r.total for r in roles)
        if free is not None and total > free:
            return device, total, free
    return None


def largest_fitting(fits: Callable[[int], bool], upper: int) -> int:
    """The largest n in [1, upper] with fits(n), for a monotone `fits`; 0 when even 1 does not fit."""
    low, high = 0, upper
    while low < high:
        middle = (low + high + 1) // 2
        if fits(middle):
            low = middle
        else:
            high = middle - 1
    return low
