"""The verifier's side of SSD: start the draft process, send outcomes, receive proposals."""

from __future__ import annotations

import json
import multiprocessing
import statistics
import time

import torch

from ssdbench.decoding.batch import DecodeBatch
from ssdbench.decoding.protocols import Proposal, VerifyOutput
from ssdbench.errors import DraftServerError
from ssdbench.sampling.accept import Verdict
from ssdbench.sampling.params import RowSampling
from ssdbench.speculation import mailbox as mb
from ssdbench.speculation.codec import read_held_bonuses, read_proposal, write_outcomes
from ssdbench.speculation.local import outcomes_of
from ssdbench.speculation.policy import DEFAULT_ROUND_TIMEOUT_S
from ssdbench.spawning import start_uninterrupted
from ssdbench.speculation.server import DraftSpec, serve

START_TIMEOUT_S = 600.0


class DraftServer:
    """A running draft process and its mailbox. Use as a context manager: it always stops the process."""

    def __init__(self, spec: DraftSpec, *, num_rows: int, max_prompt: int, vocab_size: int, with_q: bool,
                 round_timeout_s: float = DEFAULT_ROUND_TIMEOUT_S, payload_device: str = "cpu") -> None:
        self.spec = spec
        self.round_timeout_s = round_timeout_s
        self.box = mb.Mailbox.create(num_rows=num_rows, max_prompt=max_prompt, k=spec.k,
                                     vocab_size=vocab_size, with_q=with_q, payload_device=payload_device,
                                     fork_width=spec.fan_out.budget if spec.posts_forks else 0)
        context = multiprocessing.get_context("spawn")
        self.process = context.Process(target=serve, args=(self.box, spec), name="ssdbench-draft", daemon=True)
        self._expected = 0

    def __enter__(self) -> DraftServer:
        start_uninterrupted(self.process)
        if not self.box.wait_for(mb.STATUS, mb.STATUS_OK, is_alive=self._alive_and_starting, timeout_s=START_TIMEOUT_S):
            self._raise("the draft process did not start")
        self.kernels = json.loads(self.box.read_error() or "{}")  # what the draft process runs on
        self.box.write_error("")
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def _alive_and_starting(self) -> bool:
        return self.process.is_alive() and int(self.box.ctrl[mb.STATUS]) != mb.STATUS_ERROR

    def stop(self) -> None:
        """Ask the process to stop; kill it if it does not within two seconds."""
        if self.process.is_alive():
            self.box.post_request(mb.KIND_STOP)
            self.process.join(timeout=2.0)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(timeout=2.0)

    def post(self, kind: int) -> None:
        self.box.fence()  # the verifier is done reading the payload the draft may now overwrite
        self._expected = self.box.post_request(kind)

    def round_trip_ms(self, repeats: int = 20) -> dict:
        """The channel's measured round trip: a request, one payload row written back from the draft's device,
        the answer (median and spread of `repeats`), and where the payload lives."""
        times = []
        for _ in range(repeats + 1):  # the first is a warm-up
            start = time.perf_counter()
            self.post(mb.KIND_PING)
            self.wait()
            times.append((time.perf_counter() - start) * 1e3)
        times = sorted(times[1:])
        return {"payload_device": str(self.box.payload_device), "round_trips": repeats,
                "median_ms": round(statistics.median(times), 4), "min_ms": round(times[0], 4),
                "max_ms": round(times[-1], 4)}

    def wait(self) -> None:
        """Block until the last request is answered; a dead, hung or failing draft is a one-line error."""
        if not self.box.wait_for(mb.RESP_SEQ, self._expected, is_alive=self.process.is_alive,
                                 timeout_s=self.round_timeout_s):
            if int(self.box.ctrl[mb.RESP_SEQ]) != self._expected:
                if self.process.is_alive():  # alive but silent: hung (stopped, deadlocked, swapping)
                    self._raise(f"the draft process is alive but did not answer within --round-timeout-s "
                                f"{self.round_timeout_s:g} s; raise it if the draft is only slow")
                self._raise("the draft process stopped answering")
        if int(self.box.ctrl[mb.STATUS]) == mb.STATUS_ERROR:
            self._raise("the draft process failed")

    def wait_for_fork(self) -> None:
        """Block until the draft has posted the fork that follows the last answer (synthetic hits only).

        Costs no more than ssd itself: the next answer comes after that fork in any case."""
        if not self.box.wait_for(mb.FORK_SEQ, self._expected, is_alive=self.process.is_alive,
                                 timeout_s=self.round_timeout_s):
            self._raise("the draft process did not post its fork")

    @property
    def pending(self) -> bool:
        return int(self.box.ctrl[mb.RESP_SEQ]) != self._expected

    def _raise(self, what: str) -> None:
        message = self.box.read_error()
        code = self.process.exitcode
        self.stop()
        detail = message or (f"exit code {code}" if code is not None else "")
        if not detail:
            raise DraftServerError(what)
        raise DraftServerError(f"{what}: {detail}")


class RemoteSsdProposer:
    """Proposer for `ssd`: the speculator runs in the draft process, concurrently with verification."""

    name = "ssd"
    wants_hidden = False

    def __init__(self, server: DraftServer, sampling: RowSampling) -> None:
        self.server = server
        self.sampling = sampling
        self._last_accepted: list[int] = []

    def prefill(self, batch: DecodeBatch) -> None:
        """Send the prompts and return at once: the draft prefills while the target does."""
        box, n = self.server.box, batch.size
        box.ctrl[mb.NUM_ROWS], box.ctrl[mb.MAX_LEN] = n, batch.max_len
        box.prompts.zero_()
        for b, row in enumerate(batch.rows):
            box.prompts[b, : len(row.prompt_ids)] = torch.tensor(row.prompt_ids)
            box.prompt_lens[b] = len(row.prompt_ids)
        box.temperature[:n], box.top_p[:n] = self.sampling.temperature, self.sampling.top_p
        self.server.post(mb.KIND_BATCH)
        self._last_accepted = [0] * n

    def observe_prefill(self, batch: DecodeBatch, output: VerifyOutput) -> None:
        pass  # drafts from its own forwards; the target's prompt states are not needed

    def propose(self, batch: DecodeBatch) -> Proposal:
        start = time.perf_counter()
        if self.server.pending:  # the prefill acknowledgement, the first round only
            self.server.wait()
        box, n = self.server.box, batch.size
        write_outcomes(box, outcomes_of(batch, self._last_accepted))
        self.server.post(mb.KIND_ROUND)
        self.server.wait()
        return read_proposal(box, n, wait_ms=(time.perf_counter() - start) * 1e3)

    def held_bonuses(self, num_accepted: list[int]) -> list[list[int]]:
        """Per row, the bonus tokens the draft's fork branches on for its accepted count (synthetic hits)."""
        self.server.wait_for_fork()
        return read_held_bonuses(self.server.box, num_accepted)

    def observe(self, batch: DecodeBatch, verdict: Verdict, output: VerifyOutput) -> None:
        self._last_accepted = verdict.num_accepted.tolist()

    def close(self) -> None:
        pass  # the server outlives a batch; its owner stops it
