"""A tensor-parallel target: the native model split over `tp` processes that ssdbench starts itself.

Megatron-style split of each decoder layer (docs/DESIGN.md §4.4):
- q/k/v and gate/up are split by output (column-parallel): rank r holds heads
  [r H/tp, (r+1) H/tp), KV heads likewise, and intermediate columns [r I/tp, (r+1) I/tp);
  attention and the SiLU gate then need nothing from other ranks.
- o and down are split by input (row-parallel): each rank's product is a partial sum,
  added up by one all-reduce per projection, so every rank holds the full residual stream.
- the embedding, norms and lm_head are replicated: every rank computes the same logits,
  rank 0 returns them (the lm_head is a small share of a large model's weights).

Rank 0 lives in the run's own process and is what the decoding code holds: a
`TensorParallelModel` with the model interface (`allocate`, `forward`, `copy_slots`). Each
call is first broadcast to ranks 1..tp-1 over a gloo control group, then all ranks run it.
Ranks 1..tp-1 are spawned processes (`_rank_main`) that build their shard from a picklable
`ShardRecipe`, the same checkpoint or random-weight recipe as rank 0. The compute group is
gloo on CPU and NCCL on CUDA; ranks meet at a TCP address, so nothing here needs them to
share a host, though `launch` starts them all on this one.

A rank that dies is noticed at once, not after a collective's timeout: each rank says on a pipe
when it is about to join the groups (rank 0 waits for that, or for the process's end, rather
than in the rendezvous, which would wait for a dead rank until START_TIMEOUT_S) and why it
failed if it fails; a collective that breaks because a peer's connection closed is reported as
RankFailed naming the rank and its reason (an exit code, a signal, or its own error line).
"""

from __future__ import annotations

import atexit
import datetime
import multiprocessing
import multiprocessing.connection
import os
import signal
import socket
import time
from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.distributed as dist

from ssdbench.errors import RankFailed, UsageError, error_line
from ssdbench.models.recipe import ModelRecipe
from ssdbench.models.shape import ModelShape
from ssdbench.spawning import start_uninterrupted

STOP = "stop"
JOINING = "joining"
DEATH_GRACE_S = 5  # after a broken collective, how long a peer that is going down gets to be seen gone
START_TIMEOUT_S = 600  # building a large shard from a checkpoint can take minutes
COLLECTIVE_TIMEOUT_S = 600


@dataclass(frozen=True)
class ShardRecipe:
    """How every rank builds its shard of the same model (picklable): the model's recipe, and the threads."""

    model: ModelRecipe  # its device is rank 0's; rank r of a CUDA target uses cuda:(index + r)
    threads: int | None = None  # torch threads per rank (CPU)


def shard_lookup(shape: ModelShape, lookup: Callable[[str], torch.Tensor | None], *, rank: int,
                 tp: int) -> Callable[[str], torch.Tensor | None]:
    """name -> rank `rank`'s slice of the full tensor `lookup(name)` gives (replicated tensors whole)."""
    d = shape.head_dim
    rows = {"q_proj": shape.num_heads // tp * d, "k_proj": shape.num_kv_heads // tp * d,
            "v_proj": shape.num_kv_heads // tp * d, "gate_proj": shape.intermediate // tp,
            "up_proj": shape.intermediate // tp}  # column-parallel: a block of output rows
    cols = {"o_proj": shape.num_heads // tp * d, "down_proj": shape.intermediate // tp}  # row-parallel

    def sliced(name: str) -> torch.Tensor | None:
        tensor = lookup(name)
        if tensor is None:
            return None
        proj = name.split(".")[-2]
        if proj in rows:  # weight [out, in] or bias [out]
            n = rows[proj]
            return tensor[rank * n : (rank + 1) * n].contiguous()
        if proj in cols and name.endswith(".weight"):  # weight [out, in]
            n = cols[proj]
            return tensor[:, rank * n : (rank + 1) * n].contiguous()
        if proj in cols and rank > 0:  # a row-parallel bias is added once, by rank 0
            return torch.zeros_like(tensor)
        return tensor

    return sliced


class RowParallelLinear:
    """A row-parallel projection: this rank's partial product, summed over ranks."""

    def __init__(self, inner, group) -> None:
        self.inner, self.group = inner, group
        self.name = inner.name

    def __call__(self, x: torch.Tensor) -> torch.Tensor:  # [..., in/tp] -> [..., out]
        y = self.inner(x)
        dist.all_reduce(y, group=self.group)
        return y

    def nbytes(self) -> int:
        return self.inner.nbytes()


def build_shard(recipe: ShardRecipe, *, rank: int, tp: int, group):
    """Rank `rank`'s NativeCausalLM, its o/down projections all-reducing over `group`."""
    from ssdbench.kernels.probe import default_cache_path
    from ssdbench.models.dtypes import torch_dtype
    from ssdbench.models.build import build_from_lookup
    from ssdbench.models.recipe import full_shape_and_lookup

    model, device = recipe.model, rank_device(recipe.model.device, rank)
    full, lookup = full_shape_and_lookup(model, device=device)
    local = build_from_lookup(full.tensor_parallel_shard(tp), shard_lookup(full, lookup, rank=rank, tp=tp),
                              device=device, dtype=torch_dtype(model.dtype), backend=model.attention,
                              weights="fp32", linear_kernel=model.linear_kernel,
                              cache=None if model.random_shape else default_cache_path())
    for layer in local.layers:
        layer.o = RowParallelLinear(layer.o, group)
        layer.down = RowParallelLinear(layer.down, group)
    return full, local


class TensorParallelModel:
    """Rank 0 of a tensor-parallel target, with the native model's interface.

    Every model call is broadcast to the other ranks before rank 0 runs it, so all ranks
    meet in the same collectives in the same order. `close` stops the other ranks.
    """

    def __init__(self, full_shape: ModelShape, local, *, tp: int, control, processes: list, statuses: list) -> None:
        self.full_shape, self.local, self.tp = full_shape, local, tp
        self._control, self._processes, self._statuses = control, processes, statuses
        self.closed = False

    def allocate(self, batch_size: int, max_len: int) -> None:
        self._call("allocate", batch_size, max_len)

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, **kwargs):
        return self._call("forward", tokens, positions, **kwargs)

    __call__ = forward

    def copy_slots(self, row: int, src: torch.Tensor, dst: torch.Tensor) -> None:
        self._call("copy_slots", row, src, dst)

    def weight_bytes_per_forward(self) -> int:
        """Bytes read per forward by all ranks together (replicated tensors once per rank)."""
        return self.local.weight_bytes_per_forward() * self.tp

    def describe(self) -> dict:
        return {**self.local.describe(), "tensor_parallel": self.tp, "model_type": self.full_shape.model_type,
                "weight_bytes_per_forward": self.weight_bytes_per_forward()}

    def kernel_names(self) -> dict:
        return {**self.local.kernel_names(), "tensor_parallel": self.tp}

    @property
    def shape(self) -> ModelShape:
        return self.full_shape

    def __getattr__(self, name: str) -> Any:  # device, dtype, vocab_size, skipped_layers, kernels, ...
        if name.startswith("_") or name in ("local", "full_shape"):
            raise AttributeError(name)
        return getattr(self.local, name)

    def close(self) -> None:
        """Stop ranks 1..tp-1 and leave the process groups (idempotent)."""
        if self.closed:
            return
        self.closed = True
        try:
            dist.broadcast_object_list([STOP], src=0, group=self._control)
        except RuntimeError:
            pass  # a rank already gone: nothing left to stop
        for process in self._processes:
            process.join(timeout=30)
            if process.is_alive():
                process.terminate()
        dist.destroy_process_group()

    def _call(self, op: str, *args, **kwargs):
        if self.closed:
            raise UsageError("the tensor-parallel target was closed")
        _raise_if_a_rank_ended(self._processes, self._statuses, "while decoding")
        try:
            dist.broadcast_object_list([(op, _to_cpu(args), _to_cpu(kwargs))], src=0, group=self._control)
            return getattr(self.local, op)(*args, **kwargs)
        except RuntimeError:  # a collective broke: a peer's connection closed, most likely because it died
            _raise_if_a_rank_ended(self._processes, self._statuses, "while decoding", grace_s=DEATH_GRACE_S)
            raise


def launch(recipe: ShardRecipe, tp: int) -> TensorParallelModel:
    """Start ranks 1..tp-1, build rank 0 here, and return it once every rank has its shard."""
    if dist.is_initialized():
        raise UsageError("one tensor-parallel target per process: a process group is already open")
    address = ("127.0.0.1", _free_port())
    ctx = multiprocessing.get_context("spawn")
    pipes = [ctx.Pipe(duplex=False) for _ in range(1, tp)]  # (reader here, writer in rank r)
    processes = [ctx.Process(target=_rank_main, args=(recipe, rank, tp, address, writer), daemon=True,
                             name=f"ssdbench-tp-rank{rank}") for rank, (_, writer) in enumerate(pipes, start=1)]
    for process in processes:
        start_uninterrupted(process)
    statuses = [reader for reader, _ in pipes]
    try:
        _wait_until_joining(processes, statuses)
        compute, control = _join_groups(recipe, 0, tp, address)
        full, local = build_shard(recipe, rank=0, tp=tp, group=compute)
        dist.barrier(group=control)  # every rank has built its shard
    except BaseException as err:
        try:
            if isinstance(err, RuntimeError):  # a broken collective: say which rank ended, and why
                _raise_if_a_rank_ended(processes, statuses, "while building its shard", grace_s=DEATH_GRACE_S)
        finally:
            for process in processes:
                process.terminate()
            if dist.is_initialized():
                dist.destroy_process_group()
        raise
    model = TensorParallelModel(full, local, tp=tp, control=control, processes=processes, statuses=statuses)
    atexit.register(model.close)
    return model


def _rank_main(recipe: ShardRecipe, rank: int, tp: int, address: tuple[str, int], status) -> None:
    """Ranks 1..tp-1: build the shard, then run what rank 0 broadcasts until it says stop. A failure is
    one line on `status` for rank 0 to report, and exit code 1 (no traceback on the user's terminal)."""
    doing = "while building its shard"
    try:
        if recipe.threads:
            torch.set_num_threads(recipe.threads)
        _say(status, JOINING)
        compute, control = _join_groups(recipe, rank, tp, address)
        _, local = build_shard(recipe, rank=rank, tp=tp, group=compute)
        dist.barrier(group=control)
        doing = "while decoding"
        _serve(local, control, rank_device(recipe.model.device, rank))
    except Exception as err:  # noqa: BLE001 - any failure of this rank is reported the same way
        _say(status, f"failed {doing}: {error_line(err)}")
        raise SystemExit(1) from None
    dist.destroy_process_group()


def _serve(local, control, device: str) -> None:
    """Run each call rank 0 broadcasts, until it says stop."""
    while True:
        message = [None]
        dist.broadcast_object_list(message, src=0, group=control)
        if message[0] == STOP:
            return
        op, args, kwargs = message[0]
        getattr(local, op)(*_to_device(args, device), **_to_device(kwargs, device))


def _say(status, line: str) -> None:
    """Tell rank 0 (best effort: if rank 0 is gone there is nobody to tell)."""
    try:
        status.send(line)
    except OSError:
        pass


def _wait_until_joining(processes: list, statuses: list, timeout_s: float = START_TIMEOUT_S) -> None:
    """Wait until every rank is about to join the groups, or raise RankFailed for one that ended first
    (the rendezvous itself would wait for a dead rank until its timeout)."""
    deadline = time.monotonic() + timeout_s
    for rank, (process, status) in enumerate(zip(processes, statuses), start=1):
        while not status.poll():
            if not process.is_alive() or time.monotonic() > deadline:
                _raise_if_a_rank_ended(processes, statuses, "while starting", grace_s=1)
                raise RankFailed(f"tensor-parallel rank {rank} did not start within {timeout_s:.0f} s")
            multiprocessing.connection.wait([status, process.sentinel], timeout=1.0)
        if (said := _last_words(status)) is not None:  # it failed before joining
            raise RankFailed(f"tensor-parallel rank {rank} {said}")


def _raise_if_a_rank_ended(processes: list, statuses: list, doing: str, grace_s: float = 0.0) -> None:
    """RankFailed for the first rank that has ended (waiting up to `grace_s` for one to), with its reason:
    its own line on its status pipe, else how the process ended."""
    deadline = time.monotonic() + grace_s
    while True:
        for rank, (process, status) in enumerate(zip(processes, statuses), start=1):
            if process.is_alive():
                continue
            said = _last_words(status) or f"{_how_it_ended(process.exitcode)} {doing}"
            raise RankFailed(f"tensor-parallel rank {rank} {said}")
        if time.monotonic() >= deadline:
            return
        multiprocessing.connection.wait([p.sentinel for p in processes], timeout=max(0.0, deadline - time.monotonic()))


def _last_words(status) -> str | None:
    """The failure line a rank sent before it ended, if it sent one (JOINING is not one)."""
    said = None
    try:
        while status.poll():
            said = status.recv()
    except (EOFError, OSError):  # the rank's end of the pipe is closed: nothing more to read
        pass
    return None if said == JOINING else said


def _how_it_ended(exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        return f"was killed by {signal.Signals(-exitcode).name}"
    return f"exited with code {exitcode}"


def _join_groups(recipe: ShardRecipe, rank: int, tp: int, address: tuple[str, int]):
    """(compute group: the default one, NCCL on CUDA else gloo; control group: gloo)."""
    cuda = torch.device(recipe.model.device).type == "cuda"
    if cuda:
        torch.cuda.set_device(torch.device(rank_device(recipe.model.device, rank)))
    dist.init_process_group("nccl" if cuda else "gloo", init_method=f"tcp://{address[0]}:{address[1]}", rank=rank,
                            world_size=tp, timeout=datetime.timedelta(seconds=START_TIMEOUT_S))
    control = dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=COLLECTIVE_TIMEOUT_S))
    return dist.group.WORLD, control


def rank_device(device: str, rank: int) -> str:
    """Rank `rank`'s device: the rank-th GPU from the target's on CUDA; the same host on CPU."""
    dev = torch.device(device)
    return f"cuda:{(dev.index or 0) + rank}" if dev.type == "cuda" else str(dev)


def rank_devices(device: str, tp: int) -> list[str]:
    """Every rank's device, rank 0 first."""
    return [rank_device(device, rank) for rank in range(tp)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _to_cpu(value):
    if isinstance(value, torch.Tensor):
        return value.cpu()
    if isinstance(value, (list, tuple)):
        return type(value)(_to_cpu(v) for v in value)
    if isinstance(value, dict):
        return {k: _to_cpu(v) for k, v in value.items()}
    return value


def _to_device(value, device: str):
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, (list, tuple)):
        return type(value)(_to_device(v, device) for v in value)
    if isinstance(value, dict):
        return {k: _to_device(v, device) for k, v in value.items()}
    return value


def cpu_threads_per_rank(total: int | None, tp: int) -> int:
    """Threads each CPU rank gets so the ranks together use `total` (default: this machine's cores)."""
    return max(1, (total or os.cpu_count() or 1) // tp)
