"""Prompt-lookup proposals: continue the latest earlier occurrence of the text's own suffix.

Deterministic, so each proposed token is a point mass (q = one-hot) for verification.
"""

from __future__ import annotations

import torch

from ssdbench.decoding.batch import DecodeBatch
from ssdbench.decoding.protocols import Proposal, VerifyOutput
from ssdbench.sampling.accept import Verdict


def lookup_continuation(tokens: list[int], *, max_ngram: int, num_tokens: int) -> list[int]:
    """Up to num_tokens tokens that followed the latest earlier match of the longest suffix n-gram."""
    for n in range(min(max_ngram, len(tokens) - 1), 0, -1):
        suffix = tokens[-n:]
        for start in range(len(tokens) - n - 1, -1, -1):
            if tokens[start : start + n] == suffix:
                return tokens[start + n : start + n + num_tokens]
    return []


class NgramProposer:
    """No model: proposals cost almost nothing and are often right on code and quoted text."""

    name = "ngram"
    wants_hidden = False

    def __init__(self, *, k: int, max_ngram: int = 3) -> None:
        self.k = k
        self.max_ngram = max_ngram

    def prefill(self, batch: DecodeBatch) -> None:
        pass

    def observe_prefill(self, batch: DecodeBatch, output: VerifyOutput) -> None:
        pass  # drafts from its own forwards; the target's prompt states are not needed

    def propose(self, batch: DecodeBatch) -> Proposal:
        rows = [
            [] if row.is_finished else lookup_continuation(row.tokens, max_ngram=self.max_ngram, num_tokens=self.k)
            for row in batch.rows
        ]
        tokens = torch.zeros(batch.size, self.k, dtype=torch.int64)  # [B, K]
        for i, guess in enumerate(rows):
            tokens[i, : len(guess)] = torch.tensor(guess, dtype=torch.int64)
        num_proposed = torch.tensor([len(g) for g in rows], dtype=torch.int64)  # [B]
        return Proposal(tokens=tokens, q=None, num_proposed=num_proposed)

    def observe(self, batch: DecodeBatch, verdict: Verdict, output: VerifyOutput) -> None:
        pass

    def close(self) -> None:
        pass
