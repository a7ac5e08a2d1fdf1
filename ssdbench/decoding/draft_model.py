"""SD's proposer: a draft model drafts K tokens one by one, in the target's process."""

from __future__ import annotations

import torch

from ssdbench.decoding.batch import DecodeBatch
from ssdbench.decoding.protocols import CausalModel, Proposal
from ssdbench.decoding.ragged import forward_chunks, last_logits
from ssdbench.sampling.params import RowSampling
from ssdbench.sampling.probs import logits_to_probs, sample_from


class DraftModelProposer:
    """Drafts with its own KV cache; `_draft_len[b]` is how much of row b's tokens it holds."""

    name = "draft-model"

    def __init__(self, draft: CausalModel, *, lookahead: int, sampling: RowSampling, generator: torch.Generator | None):
        self.draft = draft
        self.lookahead = lookahead
        self.sampling = sampling
        self.generator = generator
        self._draft_len: list[int] = []
        self._base_len: list[int] = []

    def prefill(self, batch: DecodeBatch) -> None:
        self.draft.allocate(batch.size, batch.max_len)
        prompts = [row.prompt_ids for row in batch.rows]
        forward_chunks(self.draft, prompts, [0] * batch.size)
        self._draft_len = [len(p) for p in prompts]

    def propose(self, batch: DecodeBatch) -> Proposal:
        chunks, starts = self._catch_up_chunks(batch)
        logits = last_logits(forward_chunks(self.draft, chunks, starts), [len(c) for c in chunks])  # [B, V]
        self._base_len = [row.target_len + 1 for row in batch.rows]  # tokens incl. the pending one
        tokens, qs = [], []
        for step in range(self.lookahead):
            token, q = self._draw(logits)  # [B], [B, V] | None
            tokens.append(token)
            qs.append(q)
            if step + 1 < self.lookahead:
                positions = torch.tensor(self._base_len, device=token.device) + step  # [B]
                logits = self.draft.forward(token.unsqueeze(1), positions.unsqueeze(1))[:, 0]  # [B, V]
        num_proposed = torch.tensor(
            [0 if row.is_finished else self.lookahead for row in batch.rows], dtype=torch.int64
        )  # [B]
        q = None if qs[0] is None else torch.stack(qs, dim=1)  # [B, K, V]
        return Proposal(tokens=torch.stack(tokens, dim=1), q=q, num_proposed=num_proposed)  # tokens [B, K]

    def observe(self, batch: DecodeBatch, num_accepted: list[int]) -> None:
        """The draft holds the pending token and x_1..x_{K-1}; accepted ones stay valid."""
        for i, n in enumerate(num_accepted):
            self._draft_len[i] = self._base_len[i] + min(n, self.lookahead - 1)

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
