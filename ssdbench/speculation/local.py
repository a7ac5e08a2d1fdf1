"""SSD's proposer with the speculator in the verifier's own process, one step after another.

Same speculator code as the draft server, minus the concurrency: useful for tests of
exactness, tree attention and cache consistency, and for single-device debugging.
"""

from __future__ import annotations

import time


from ssdbench.decoding.batch import DecodeBatch
from ssdbench.decoding.protocols import Proposal, VerifyOutput
from ssdbench.sampling.accept import Verdict
from ssdbench.sampling.params import RowSampling
from ssdbench.speculation.codec import proposal_from_answer
from ssdbench.speculation.speculator import Answer, Speculator


def outcomes_of(batch: DecodeBatch, last_accepted: list[int]) -> list[tuple[bool, int, int]]:
    """Per row: (still active, drafts accepted last round, the pending bonus token)."""
    return [(not row.is_finished, last_accepted[b], row.tokens[-1]) for b, row in enumerate(batch.rows)]


class LocalSsdProposer:
    name = "ssd-local"
    wants_hidden = False

    def __init__(self, speculator: Speculator, sampling: RowSampling) -> None:
        self.speculator = speculator
        self.sampling = sampling
        self.history: list[Answer] = []  # every answer, for tests to inspect hits and misses
        self._last_accepted: list[int] = []

    def prefill(self, batch: DecodeBatch) -> None:
        self.speculator.start_batch([row.prompt_ids for row in batch.rows], self.sampling, max_len=batch.max_len)
        self.speculator.build()
        self._last_accepted = [0] * batch.size

    def observe_prefill(self, batch: DecodeBatch, output: VerifyOutput) -> None:
        pass  # drafts from its own forwards; the target's prompt states are not needed

    def propose(self, batch: DecodeBatch) -> Proposal:
        start = time.perf_counter()
        answer = self.speculator.answer(outcomes_of(batch, self._last_accepted))
        self.history.append(answer)
        self.speculator.build()
        draft_ms = (time.perf_counter() - start) * 1e3
        return proposal_from_answer(answer, draft_ms=draft_ms, wait_ms=draft_ms)

    def held_bonuses(self, num_accepted: list[int]) -> list[list[int]]:
        """Per row, the bonus tokens the cache holds for its accepted count (synthetic hits)."""
        return [self.speculator.cache.bonuses(b, k) for b, k in enumerate(num_accepted)]

    def observe(self, batch: DecodeBatch, verdict: Verdict, output: VerifyOutput) -> None:
        self._last_accepted = verdict.num_accepted.tolist()

    def close(self) -> None:
        pass
