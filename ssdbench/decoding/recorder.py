"""Collects the loop's per-round and per-request results as columns for steps/requests.parquet.

Appending to Python lists per row and round keeps recording off the decode path's cost.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from ssdbench.decoding.batch import RowState
from ssdbench.decoding.loop import StepRecord
from ssdbench.records.schema import COLUMNS, COUNTED_BY_SERVER, COUNTED_BY_SSDBENCH

STEP_FIELDS = tuple(f.name for f in fields(StepRecord) if f.name not in ("row", "extras"))
KEY_FIELDS = ("run_id", "method", "engine", "suite", "prompt_id", "request_idx", "repeat")
# steps columns a method fills through StepRecord.extras (ssd: cache_hit, backup, fan_out_total); null for the others
EXTRA_STEP_COLUMNS = tuple(c.name for c in COLUMNS["steps"]
                           if c.name not in (*KEY_FIELDS, *STEP_FIELDS, "row", "acceptance", "counted_by"))


@dataclass(frozen=True)
class RequestKey:
    """Identifies one request of a run; repeated on every row of both tables."""

    method: str
    engine: str
    suite: str
    prompt_id: str
    request_idx: int
    repeat: int


def empty_columns(table: str) -> dict[str, list]:
    """Every column of `table`, no rows: a batch that ends at its first token records no rounds,
    and readers still find every column."""
    return {column.name: [] for column in COLUMNS[table]}


@dataclass
class Recorder:
    run_id: str
    steps: dict[str, list] = field(default_factory=lambda: empty_columns("steps"))
    requests: dict[str, list] = field(default_factory=lambda: empty_columns("requests"))
    events: dict[str, list] = field(default_factory=dict)  # the draft process's timeline (ssd)
    endpoints: dict[str, list] = field(default_factory=dict)  # requests sent to serving engines (--endpoint)
    kernels: dict[str, dict] = field(default_factory=dict)  # role -> kernels it ran, for roles outside this process
    channels: dict[str, dict] = field(default_factory=dict)  # method -> its draft process channel and round trip

    def add_events(self, method: str, role: str, events: list[tuple[str, int, int]]) -> None:
        for kind, start_ns, end_ns in events:
            self._append(self.events, {"run_id": self.run_id, "method": method, "role": role, "kind": kind,
                                       "t_start_ns": start_ns, "t_end_ns": end_ns})

    def add_steps(self, keys: list[RequestKey], records: list[StepRecord], *, acceptance: str = "exact") -> None:
        """acceptance: how these rounds accepted drafts (`exact`, or `synthetic:...`: outputs not the target's)."""
        for record in records:
            self._append(self.steps, {"run_id": self.run_id, **_key_dict(keys[record.row]), "acceptance": acceptance,
                                      "counted_by": COUNTED_BY_SSDBENCH})
            self._append(self.steps, {name: getattr(record, name) for name in STEP_FIELDS})
            self._append(self.steps, {name: record.extras.get(name) for name in EXTRA_STEP_COLUMNS})
            self._append(self.steps, {"row": record.row})

    def add_server_rounds(self, key: RequestKey, accepted: list[int], proposed: list[int] | None, *,
                          source: str) -> None:
        """One steps row per verify step a serving engine reported for one request (`source`: the response
        field). The server gives counts only: emitted is accepted + 1 (its acceptance length counts the
        bonus), and what it does not say (times, batch, row, bonus token) stays null rather than made up."""
        drafted = proposed if proposed is not None and len(proposed) == len(accepted) else [None] * len(accepted)
        for number, (kept, offered) in enumerate(zip(accepted, drafted), start=1):
            row = {"run_id": self.run_id, **_key_dict(key), "round": number, "proposed": offered, "accepted": kept,
                   "emitted": kept + 1, "acceptance": "exact", "counted_by": COUNTED_BY_SERVER + source}
            self._append(self.steps, {column: row.get(column) for column in self.steps})

    def add_request(self, key: RequestKey, row: RowState, *, seed: int, temperature: float, times_ns: tuple[int, int, int], rounds: int,
                    batch_size: int) -> None:
        start_ns, first_ns, end_ns = times_ns
        new_tokens = row.num_new
        decode_ms = (end_ns - first_ns) / 1e6
        per_token = decode_ms / (new_tokens - 1) if new_tokens > 1 and decode_ms > 0 else None
        self._append(self.requests, {
            "run_id": self.run_id, **_key_dict(key), "batch_size": batch_size, "seed": seed,
            "temperature": temperature,
            "prompt_tokens": len(row.prompt_ids), "new_tokens": new_tokens,
            "ttft_ms": (first_ns - start_ns) / 1e6, "decode_ms": decode_ms, "tpot_ms": per_token,
            "decode_tokens_per_s": 1000.0 / per_token if per_token else None, "rounds": rounds,
            "finish_reason": row.finish_reason or "length",
            "prompt_token_ids": list(row.prompt_ids), "output_token_ids": row.output_ids,
        })

    @staticmethod
    def _append(table: dict[str, list], values: dict) -> None:
        for name, value in values.items():
            table.setdefault(name, []).append(value)


def _key_dict(key: RequestKey) -> dict:
    return {
        "method": key.method, "engine": key.engine, "suite": key.suite, "prompt_id": key.prompt_id,
        "request_idx": key.request_idx, "repeat": key.repeat,
    }
