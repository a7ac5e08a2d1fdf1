"""The state of a batch of sequences being decoded: committed tokens, lengths, finish."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class RowState:
    """One sequence. `tokens` is prompt + committed output; its last token is pending (no KV yet)."""

    prompt_ids: list[int]
    tokens: list[int]
    max_new_tokens: int
    eos_ids: frozenset[int]
    finish_reason: str | None = None
    finish_round: int | None = None

    @property
    def num_new(self) -> int:
        return len(self.tokens) - len(self.prompt_ids)

    @property
    def output_ids(self) -> list[int]:
        return self.tokens[len(self.prompt_ids) :]

    @property
    def is_finished(self) -> bool:
        return self.finish_reason is not None

    @property
    def target_len(self) -> int:
        """Tokens whose target K/V is in the cache: all but the pending one."""
        return len(self.tokens) - 1

    def commit(self, new_tokens: list[int], round_idx: int) -> int:
        """Append tokens, stopping at EOS or the token limit. Returns how many were committed."""
        committed = 0
        for token in new_tokens:
            if self.is_finished:
                break
            self.tokens.append(token)
            committed += 1
            if token in self.eos_ids:
                self._finish("eos", round_idx)
            elif self.num_new >= self.max_new_tokens:
                self._finish("length", round_idx)
        return committed

    def end(self, reason: str, round_idx: int) -> None:
        """Finish the row from outside the loop (a server's stop string or a client gone); its
        committed tokens stay. A row already finished keeps its reason."""
        if not self.is_finished:
            self._finish(reason, round_idx)

    def _finish(self, reason: str, round_idx: int) -> None:
        self.finish_reason = reason
        self.finish_round = round_idx


@dataclass
class DecodeBatch:
    """Rows decoded together, in lockstep rounds."""

    rows: list[RowState]
    max_len: int  # cache capacity every model of this batch allocates
    k: int  # K
    round_idx: int = 0
    extra: dict = field(default_factory=dict)

    @property
    def size(self) -> int:
        return len(self.rows)

    @property
    def active(self) -> list[int]:
        return [i for i, row in enumerate(self.rows) if not row.is_finished]

    @property
    def is_done(self) -> bool:
        return all(row.is_finished for row in self.rows)


def new_batch(
    prompts: list[list[int]], *, max_new_tokens: int, eos_ids: frozenset[int], k: int,
    capacity: int | None = None,
) -> DecodeBatch:
    """Rows for `prompts`; the cache holds `capacity` slots per row (default: what this batch needs)."""
    rows = [RowState(prompt_ids=list(p), tokens=list(p), max_new_tokens=max_new_tokens, eos_ids=eos_ids) for p in prompts]
    needed = cache_slots(max(len(p) for p in prompts), max_new_tokens=max_new_tokens, k=k)
    if capacity is not None and capacity < needed:
        raise ValueError(f"a cache of {capacity} slots for a batch that needs {needed}")
    return DecodeBatch(rows=rows, max_len=needed if capacity is None else capacity, k=k)


def cache_slots(prompt_len: int, *, max_new_tokens: int, k: int) -> int:
    """Slots a row needs: its prompt, its new tokens, one round's drafts past them, and the pending token."""
    return prompt_len + max_new_tokens + k + 2
