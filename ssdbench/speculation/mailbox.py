"""The channel between verifier and draft server: preallocated shared tensors.

A request or response is written into its buffers, then announced by bumping a sequence
counter; the other side polls the counter (each process has its own core, so polling
costs nothing the other side needs). The q-rows, the large part, are never copied
through a socket: the server writes them once where the verifier reads them. Counters
are written after the data, with no fence: x86 (TSO) keeps stores in order and loads in
order, which is what the reader relies on. Python has no portable fence to make that
explicit, so on hosts with weaker ordering (ARM, POWER, RISC-V) where the reader could see
the counter before the data and verify against stale q-rows, ssd is refused instead.

The payload (proposed tokens and q-rows) lives on `payload_device`: host shared memory for
CPU runs, or the verifier's GPU, shared with the draft process through CUDA IPC handles
(torch.multiprocessing pickles a CUDA tensor as one), so on GPUs the q-rows go from the
draft's GPU to the verifier's without passing through host memory. GPU writes are
asynchronous, so each side calls `fence()` before announcing: the draft before its answer's
counter, the verifier before a request that lets the draft overwrite what it was reading.
Control counters stay in host shared memory, where polling them costs no GPU work.
"""

from __future__ import annotations

import platform
import time
from dataclasses import dataclass

import torch

from ssdbench.errors import UsageError
from ssdbench.profiling.devices import same_device

# ctrl slots
REQ_SEQ, RESP_SEQ, REQ_KIND, NUM_ROWS, STATUS, MAX_LEN, HAS_Q, EVENT_COUNT, FORK_SEQ, REQ_NS = range(10)
CTRL_SLOTS = 10
KIND_BATCH, KIND_ROUND, KIND_STOP, KIND_PING = 1, 2, 3, 4  # PING: write a payload row back (round-trip probe)
STATUS_STARTING, STATUS_ERROR, STATUS_OK = 0, 1, 2
ERROR_BYTES = 2048
IDLE_AFTER_S, IDLE_POLL_S = 1.0, 0.001  # longer than a round here; past it an answer is at most 1 ms late
MAX_EVENTS = 8192  # the draft's timeline: the first rounds are what a picture shows
EVENT_KINDS = ("prefill", "glue", "tree", "backup", "answer", "top_up")
TOTAL_STORE_ORDER_MACHINES = ("x86_64", "amd64", "i386", "i686", "x86")  # platform.machine(), lower-cased


def check_store_order() -> None:
    """Refuse, in one line, a host whose CPU may reorder the mailbox's stores (see the module note)."""
    machine = platform.machine()
    if machine.lower() not in TOTAL_STORE_ORDER_MACHINES:
        raise UsageError(f"ssd's shared-memory channel needs x86 store ordering and this host is {machine or 'unknown'}; "
                         "run ar and sd here (--methods ar,sd), or ssd on an x86 host")


@dataclass
class Mailbox:
    ctrl: torch.Tensor  # [CTRL_SLOTS] int64
    prompts: torch.Tensor  # [B, L] int64
    prompt_lens: torch.Tensor  # [B] int64
    temperature: torch.Tensor  # [B] float32, the draft's sampling settings per row
    top_p: torch.Tensor  # [B] float32
    outcomes: torch.Tensor  # [B, 3] int64: active, accepted, bonus
    tokens: torch.Tensor  # [B, K] int64
    meta: torch.Tensor  # [B, 4] int64: depth, hit, backup code, fan-out
    q: torch.Tensor  # [B, K, V] float32
    times: torch.Tensor  # [4] float64: busy ms since last answer, backup ms, glue ms, tree ms
    error: torch.Tensor  # [ERROR_BYTES] uint8
    events: torch.Tensor  # [MAX_EVENTS, 3] int64: kind index, start ns, end ns
    forks: torch.Tensor  # [B, budget, 2] int64: (accepted k, bonus) per branch, k = -1 past the last; synthetic hits only

    @classmethod
    def create(cls, *, num_rows: int, max_prompt: int, k: int, vocab_size: int, with_q: bool,
               payload_device: str = "cpu", fork_width: int = 0) -> Mailbox:
        """fork_width: branches per row the fork may post (0: the draft does not post its fork)."""
        q_shape = (num_rows, k, vocab_size) if with_q else (1, 1, 1)
        box = cls(
            ctrl=torch.zeros(CTRL_SLOTS, dtype=torch.int64), prompts=torch.zeros(num_rows, max_prompt, dtype=torch.int64),
            prompt_lens=torch.zeros(num_rows, dtype=torch.int64), temperature=torch.zeros(num_rows),
            top_p=torch.ones(num_rows), outcomes=torch.zeros(num_rows, 3, dtype=torch.int64),
            tokens=torch.zeros(num_rows, k, dtype=torch.int64, device=payload_device),
            meta=torch.zeros(num_rows, 4, dtype=torch.int64), q=torch.zeros(q_shape, device=payload_device),
            times=torch.zeros(4, dtype=torch.float64),
            error=torch.zeros(ERROR_BYTES, dtype=torch.uint8), events=torch.zeros(MAX_EVENTS, 3, dtype=torch.int64),
            forks=torch.full((num_rows, max(fork_width, 1), 2), -1, dtype=torch.int64),
        )
        for tensor in vars(box).values():
            if tensor.device.type == "cpu":
                tensor.share_memory_()  # a CUDA tensor travels to the draft process as an IPC handle instead
        return box

    @property
    def payload_device(self) -> torch.device:
        return self.q.device

    def fence(self) -> None:
        """Finish this process's pending GPU work on the payload before the other side may read or overwrite it."""
        if self.q.device.type == "cuda":  # both: the copy may run on the source's (current) stream or the payload's
            torch.cuda.synchronize(self.q.device)
            if not same_device(self.q.device, "cuda"):  # "cuda": this process's current GPU
                torch.cuda.synchronize()

    # ---- both sides ----
    def wait_for(self, slot: int, value: int, *, is_alive, timeout_s: float | None = None) -> bool:
        """Spin until ctrl[slot] == value; False if `is_alive()` turns false (checked every ~5 ms).

        After IDLE_AFTER_S without an answer the wait is idle, not a round (the run is decoding
        other methods between this one's prompts): then poll every millisecond instead of
        spinning, so an idle draft process takes no CPU from them."""
        start = time.monotonic()
        deadline = None if timeout_s is None else start + timeout_s
        spins = 0
        while int(self.ctrl[slot]) != value:
            spins += 1
            if spins % 256 == 0:
                now = time.monotonic()
                if not is_alive() or (deadline is not None and now > deadline):
                    return False
                time.sleep(IDLE_POLL_S if now - start > IDLE_AFTER_S else 0)  # 0: let the OS run anything else pinned here
        return True

    def request_ns(self) -> int:
        """When the latest request was posted (time.monotonic_ns, the verifier's clock and this one's)."""
        return int(self.ctrl[REQ_NS])

    def has_request(self, answered: int) -> bool:
        return int(self.ctrl[REQ_SEQ]) > answered

    def post_request(self, kind: int) -> int:
        """Announce a request; its time (CLOCK_MONOTONIC, one clock for every process of the host) goes with it,
        so the draft measures the verifier's round from when it was asked, not from when it looked."""
        self.ctrl[REQ_KIND] = kind
        self.ctrl[REQ_NS] = time.monotonic_ns()
        seq = int(self.ctrl[REQ_SEQ]) + 1
        self.ctrl[REQ_SEQ] = seq
        return seq

    def post_response(self, seq: int, status: int = 2) -> None:
        self.ctrl[STATUS] = status
        self.ctrl[RESP_SEQ] = seq

    def record_event(self, kind: str, start_ns: int, end_ns: int) -> None:
        """Append one draft-side event (dropped once the buffer is full)."""
        count = int(self.ctrl[EVENT_COUNT])
        if count < MAX_EVENTS:
            self.events[count, 0], self.events[count, 1], self.events[count, 2] = EVENT_KINDS.index(kind), start_ns, end_ns
            self.ctrl[EVENT_COUNT] = count + 1

    def read_events(self) -> list[tuple[str, int, int]]:
        count = int(self.ctrl[EVENT_COUNT])
        return [(EVENT_KINDS[k], a, b) for k, a, b in self.events[:count].tolist()]

    def write_error(self, message: str) -> None:
        data = message.encode("utf-8", "replace")[: ERROR_BYTES - 1]
        self.error.zero_()
        self.error[: len(data)] = torch.tensor(list(data), dtype=torch.uint8)

    def read_error(self) -> str:
        raw = bytes(self.error.tolist())
        return raw.split(b"\0", 1)[0].decode("utf-8", "replace")
