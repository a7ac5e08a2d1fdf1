"""SD's proposer: a draft model drafts K tokens one by one, in the target's process."""

from __future__ import annotations

import torch

from ssdbench.decoding.batch import DecodeBatch
from ssdbench.decoding.draft_chain import draft_chain
from ssdbench.decoding.protocols import CausalModel, Proposal, VerifyOutput
from ssdbench.sampling.accept import Verdict
from ssdbench.sampling.params import RowSampling
from ssdbench.sampling.probs import logits_to_probs, sample_from


class DraftModelProposer:
    """Drafts with its own KV cache; `_draft_len[b]` is how much of row b's tokens it holds."""

    name = "draft-model"
    wants_hidden = False

    def __init__(self, draft: CausalModel, *, k: int, sampling: RowSampling, generator: torch.Generator | None):
        self.draft = draft
        self.k = k
        self.sampling = sampling
        self.generator = generator
        self._draft_len: list[int] = []
        self._base_len: list[int] = []

    def prefill(self, batch: DecodeBatch) -> None:
        """Nothing goes through the draft yet: the prompt does with the first round's catch-up chunk (prompt and
        first token in one forward), so the target's first token is committed, and streamed, after the target's
        prefill alone. In this process the draft's prefill would only have come after the target's, and the
        first token needs none of it (sd's TTFT had been ar's plus the draft's prompt: 1.4x on the embedded pair)."""
        self.draft.allocate(batch.size, batch.max_len)
        self._draft_len = [0] * batch.size

    def observe_prefill(self, batch: DecodeBatch, output: VerifyOutput) -> None:
        pass  # drafts from its own forwards; the target's prompt states are not needed

    def propose(self, batch: DecodeBatch) -> Proposal:
        chunks, starts = self._catch_up_chunks(batch)
        self._base_len = [row.target_len + 1 for row in batch.rows]  # tokens incl. the pending one
        next_position = torch.tensor(self._base_len, device=self.draft.device)  # [B]
        chain = draft_chain(self.draft, chunks, starts, next_position=next_position, steps=self.k,
                            draw=lambda step, logits: self._draw(logits))
        num_proposed = torch.tensor(
            [0 if row.is_finished else self.k for row in batch.rows], dtype=torch.int64
        )  # [B]
        q = None if chain.q[0] is None else torch.stack(chain.q, dim=1)  # [B, K, V]
        return Proposal(tokens=chain.tokens, q=q, num_proposed=num_proposed)  # tokens [B, K]

    def observe(self, batch: DecodeBatch, verdict: Verdict, output: VerifyOutput) -> None:
        """The draft holds the pending token and x_1..x_{K-1}; accepted ones stay valid."""
        for i, n in enumerate(verdict.num_accepted.tolist()):
            self._draft_len[i] = self._base_len[i] + min(n, self.k - 1)

    def close(self) -> None:
        pass

    def _catch_up_chunks(self, batch: DecodeBatch) -> tuple[list[list[int]], list[int]]:
        """Tokens each row has committed that the draft has not seen yet (ends with the pending one)."""
        chunks, starts = [], []
        for i, row in enumerate(batch.rows):
            # a finished row rides along with one padding token, past its committed slots
            chunks.append([row.tokens[-1]] if row.is_finished else row.tokens[self._draft_len[i] :])
            starts.append(self._draft_len[i])
        return chunks, starts

    def _draw(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """A token per row from the draft's distribution q; greedy drafts are point masses (q None)."""
        if self.sampling.all_greedy:
            return logits.argmax(dim=-1), None
        q = logits_to_probs(logits.unsqueeze(1), self.sampling)[:, 0]  # [B, V]
        return sample_from(q, self.generator), q
