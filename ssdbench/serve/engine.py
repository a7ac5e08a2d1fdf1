"""The server's decoding thread: queued requests are decoded in static batches by the run's own round
loop (decoding/loop.py) and the method's own proposers, and each request's tokens are streamed back
as its rounds commit them.

Batching policy (recorded in the manifest): **static batches**. When the thread is free it takes
the oldest waiting request and every other one already waiting, up to --max-batch, and decodes
them together until each has finished; requests arriving meanwhile wait for the next batch. A
request whose client has gone, or whose text reached a stop string, is ended at the next round
boundary (its row rides along as padding until the batch ends, as a finished row does in `run`).

Seeds: a batch draws from one generator, seeded with its first request's `seed` (else the server's
--seed plus the batch's number): a seeded request decodes reproducibly when it is alone in its batch.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from ssdbench.decoding.batch import DecodeBatch, RowState, cache_slots
from ssdbench.decoding.loop import StepRecord, decode_batch
from ssdbench.decoding.recorder import Recorder, RequestKey
from ssdbench.decoding.workload import WARMUP_TOKENS
from ssdbench.methods.base import ProposerFactory
from ssdbench.sampling.params import RowSampling, SamplingParams
from ssdbench.serve.openai_request import ServeRequest
from ssdbench.serve.spec_metrics import RequestSpeculation, ServerCounters
from ssdbench.serve.text_stream import TextStream

SUITE = "serve"  # the records' suite column for a server's requests
POLL_S = 0.05
POLICY = {"batching": "static", "meaning": "a free engine takes every waiting request, up to --max-batch, and "
                                           "decodes them together to the end; later arrivals wait for the next batch"}


@dataclass(frozen=True)
class Delta:
    text: str
    token_ids: tuple[int, ...]


@dataclass(frozen=True)
class Finished:
    reason: str  # OpenAI's: stop (EOS or a stop string) or length
    prompt_tokens: int
    completion_tokens: int
    metrics: dict | None  # spec_metrics.RequestSpeculation.as_metrics


@dataclass(frozen=True)
class Failed:
    message: str


class Ticket:
    """One request inside the server: the HTTP side awaits `events`; the engine posts to it from its thread."""

    def __init__(self, request: ServeRequest, loop: asyncio.AbstractEventLoop) -> None:
        self.request = request
        self.events: asyncio.Queue = asyncio.Queue()
        self._loop = loop
        self.gone = threading.Event()  # the client disconnected: end the request at the next round

    def post(self, event: Delta | Finished | Failed) -> None:
        self._loop.call_soon_threadsafe(self.events.put_nowait, event)


class _Unheard(Ticket):
    """A ticket nobody awaits (the warm-up's)."""

    def __init__(self, request: ServeRequest) -> None:
        self.request = request
        self.gone = threading.Event()

    def post(self, event) -> None:
        pass


@dataclass(frozen=True)
class EngineParts:
    """What the engine decodes with: the run's target, the method's proposers, the tokenizer's decode."""

    method: str
    target: object  # a CausalModel
    factory: ProposerFactory
    uses_draft: bool
    k: int
    eos_ids: frozenset[int]
    detokenize: Callable[[list[int]], str]
    base_seed: int


class Engine:
    def __init__(self, *, max_batch: int, recorder: Recorder, counters: ServerCounters) -> None:
        self.parts: EngineParts | None = None  # set on the engine's thread, once the models are loaded
        self.max_batch = max_batch
        self.recorder = recorder
        self.counters = counters
        self._queue: queue.Queue[Ticket] = queue.Queue()
        self._accepting = True
        self._stop = threading.Event()
        self._batches = 0
        self._requests = 0
        self._running: list[Ticket] = []
        self.thread: threading.Thread | None = None
        self.error: BaseException | None = None

    @property
    def accepting(self) -> bool:
        return self._accepting and self.error is None

    def submit(self, ticket: Ticket) -> None:
        self._queue.put(ticket)
        self._publish_load()

    def start(self, prepare: Callable[[contextlib.ExitStack], EngineParts], *, on_ready: Callable[[], None],
              on_failure: Callable[[], None]) -> None:
        """Decode on a thread of its own. `prepare` runs on it first (models, proposers, pinning) and may
        register what to close in the stack it is given; the stack closes on the thread when serving ends.
        `on_failure` is called (on this thread) once the engine has failed: the server then stops."""
        self.thread = threading.Thread(target=self._serve, args=(prepare, on_ready, on_failure),
                                       name="ssdbench-engine", daemon=True)
        self.thread.start()

    def stop(self, *, grace_s: float) -> None:
        """Take no more requests; let those queued or running finish for up to `grace_s`, then end the rest."""
        self._accepting = False
        deadline = time.monotonic() + grace_s
        while (not self._queue.empty() or self._running) and time.monotonic() < deadline and self._alive():
            time.sleep(POLL_S)
        for ticket in self._running:
            ticket.gone.set()
        self._stop.set()
        if self.thread is not None:
            self.thread.join()
        self._fail_waiting("the server stopped before this request was decoded")

    def _alive(self) -> bool:
        return self.thread is not None and self.thread.is_alive()

    def _serve(self, prepare, on_ready, on_failure) -> None:
        try:
            with contextlib.ExitStack() as stack:
                self.parts = prepare(stack)
                self._warm_up()
                on_ready()
                while not self._stop.is_set():
                    tickets = self._next_batch()
                    if tickets:
                        self._decode(tickets)
        except BaseException as err:  # noqa: BLE001 - the routes report it (503) and the records keep it
            self.error = err
            for ticket in self._running:
                ticket.post(Failed(f"the engine failed: {type(err).__name__}: {err}"))
            self._running = []
            self._fail_waiting(f"the engine failed: {type(err).__name__}: {err}")
            on_failure()

    def _warm_up(self) -> None:
        """One unrecorded batch of --max-batch rows first: one-off kernel set-up stays out of the records."""
        request = ServeRequest(request_id="warm-up", chat=False, prompt_ids=(0,) * 16, max_tokens=WARMUP_TOKENS,
                               sampling=SamplingParams(), seed=0, stop=(), ignore_eos=True, stream=False,
                               include_usage=False, model="")
        self._decode([_Unheard(request) for _ in range(self.max_batch)], record=False)

    def _next_batch(self) -> list[Ticket]:
        try:
            first = self._queue.get(timeout=POLL_S)
        except queue.Empty:
            return []
        tickets = [first]
        while len(tickets) < self.max_batch:
            try:
                tickets.append(self._queue.get_nowait())
            except queue.Empty:
                break
        return [t for t in tickets if not t.gone.is_set()]

    def _fail_waiting(self, message: str) -> None:
        while True:
            try:
                self._queue.get_nowait().post(Failed(message))
            except queue.Empty:
                return

    def _publish_load(self) -> None:
        self.counters.set_load(running=len(self._running), waiting=self._queue.qsize())

    def _decode(self, tickets: list[Ticket], *, record: bool = True) -> None:
        parts = self.parts
        self._running = tickets if record else []
        self._publish_load()
        batch = self._new_batch(tickets)
        seed = parts.base_seed + self._batches if tickets[0].request.seed is None else tickets[0].request.seed
        self._batches += 1
        generator = torch.Generator(device=parts.target.device).manual_seed(seed)
        sampling = RowSampling.from_params([t.request.sampling for t in tickets], device=parts.target.device)
        streams = [TextStream(parts.detokenize, t.request.stop) for t in tickets]
        sent = [0] * len(tickets)  # output tokens each client has been sent
        done = [False] * len(tickets)  # its last chunk is out

        def on_round(b: DecodeBatch) -> None:
            for i, (ticket, row) in enumerate(zip(tickets, b.rows)):
                if done[i]:
                    continue
                if ticket.gone.is_set():
                    row.end("abort", b.round_idx)
                    done[i] = True
                    continue
                text = streams[i].advance(row.output_ids, final=row.is_finished)
                if streams[i].stopped:
                    row.end("stop", b.round_idx)
                ids = tuple(row.output_ids[sent[i]:])
                sent[i] = row.num_new
                done[i] = row.is_finished
                if text or ids:
                    ticket.post(Delta(text, ids))

        proposer = parts.factory(len(tickets), generator)
        try:
            timing, steps = decode_batch(parts.target, proposer, batch, sampling, generator, on_round=on_round)
        finally:
            if proposer is not None:
                proposer.close()
        if record:
            self._finish(tickets, batch, timing, steps, seed)
        self._running = []
        self._publish_load()

    def _new_batch(self, tickets: list[Ticket]) -> DecodeBatch:
        k = self.parts.k if self.parts.uses_draft else 0
        rows = [RowState(prompt_ids=list(t.request.prompt_ids), tokens=list(t.request.prompt_ids),
                         max_new_tokens=t.request.max_tokens,
                         eos_ids=frozenset() if t.request.ignore_eos else self.parts.eos_ids) for t in tickets]
        slots = max(cache_slots(len(r.prompt_ids), max_new_tokens=r.max_new_tokens, k=k) for r in rows)
        return DecodeBatch(rows=rows, max_len=slots, k=k)

    def _finish(self, tickets: list[Ticket], batch: DecodeBatch, timing, steps: list[StepRecord], seed: int) -> None:
        """Tell each client how its request ended, count it, and record it like a run's request."""
        keys = []
        for ticket in tickets:
            keys.append(RequestKey(self.parts.method, "native", SUITE, ticket.request.request_id, self._requests, 0))
            self._requests += 1
        self.recorder.add_steps(keys, steps, acceptance="exact")
        for i, (ticket, key, row) in enumerate(zip(tickets, keys, batch.rows)):
            own = [s for s in steps if s.row == i]
            spec = RequestSpeculation.of(own)
            self.recorder.add_request(key, row, seed=seed, temperature=ticket.request.sampling.temperature,
                                      times_ns=(timing.start_ns, timing.first_token_ns, timing.row_end_ns[i]),
                                      rounds=len(own), batch_size=len(tickets))
            reason = "length" if row.finish_reason == "length" else "stop"
            if row.finish_reason == "abort":
                reason = "abort"
            self.counters.count_request(reason=reason, prompt_tokens=len(row.prompt_ids), generated=row.num_new,
                                        spec=spec)
            ticket.post(Finished(reason, len(row.prompt_ids), row.num_new, spec.as_metrics()))
