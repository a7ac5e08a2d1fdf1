"""The one place where run-record columns are defined: names, Arrow types, units, meaning.

A run directory holds `manifest.json` and one Parquet file per table (`steps`, `requests`,
`gpu`). Column names carry their unit (`_ms`, `_ns`, `_mib`, `_w`, `_mj`, `_pct`, `_mhz`,
`_per_s`). Timestamps ending `_ns` are `time.time_ns()` (Unix epoch), one clock for every
table and process, so GPU samples line up with rounds.

Columns describe what every schema version holds: version 1 files were always written with
`steps.round` counted from 1 and `bonus_token` as described, so their readers need no change.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa

SCHEMA_VERSION = 6  # v2: requests.batch_size; v3: steps.acceptance; v4: steps.counted_by (rounds from a server);
# v5: endpoints.acceptance_invalid and endpoints.model_asked; v6: endpoints.cached_prompt_tokens, target_passes and
# text_matches_ar
# Key under which the version is stored in each Parquet file's key-value metadata.
VERSION_KEY = b"ssdbench.schema_version"
TABLE_KEY = b"ssdbench.table"

MANIFEST_NAME = "manifest.json"
TABLE_NAMES = ("steps", "requests", "gpu")
# Tables a run may lack (runs written before they existed, or methods that have none).
OPTIONAL_TABLE_NAMES = ("events", "endpoints")
COUNTED_BY_SSDBENCH = "ssdbench"  # steps.counted_by of a round the decode loop ran and timed
COUNTED_BY_SERVER = "server: "  # prefix of steps.counted_by on a serving engine's reported rounds
STATUS_RUNNING, STATUS_COMPLETE = "running", "complete"
STATUS_FAILED, STATUS_INTERRUPTED = "failed", "interrupted"


class SchemaError(ValueError):
    """Columns that do not fit a table's schema: a bug in the code producing them."""


@dataclass(frozen=True)
class Column:
    name: str
    type: pa.DataType
    description: str
    nullable: bool = False


def _c(name: str, type_: pa.DataType, description: str, *, nullable: bool = False) -> Column:
    return Column(name, type_, description, nullable)


_STR, _I32, _I64, _F64 = pa.string(), pa.int32(), pa.int64(), pa.float64()

_REQUEST_KEY = (
    _c("run_id", _STR, "id of the run (also the run directory's default name)"),
    _c("method", _STR, "decoding method: ar, sd or ssd"),
    _c("engine", _STR, "engine that ran the method (e.g. native, hf)"),
    _c("suite", _STR, "prompt suite name"),
    _c("prompt_id", _STR, "prompt id within the suite"),
    _c("request_idx", _I64, "index of the request within the run"),
    _c("repeat", _I32, "repeat number of this prompt (0-based)"),
)

COLUMNS: dict[str, tuple[Column, ...]] = {
    "steps": _REQUEST_KEY + (
        _c("round", _I32, "verify round of the request, counted from 1 (round 0 is the prefill, which "
           "draws the first token and has no steps row)"),
        _c("batch_size", _I32, "sequences in the batch this round; null on a server's rounds (counted_by)",
           nullable=True),
        _c("row", _I32, "this sequence's row in the batch; null on a server's rounds", nullable=True),
        _c("proposed", _I32, "draft tokens proposed (K; 0 for ar); null on a server's round where it gives no "
           "per-step draft count", nullable=True),
        _c("accepted", _I32, "proposed tokens accepted by verification"),
        _c("emitted", _I32, "tokens committed this round, bonus included, cut at EOS/limit (a server's round: "
           "accepted + 1, as the server counts its acceptance length)"),
        _c("bonus_token", _I64, "token id the target drew after the accepted prefix; an output token "
           "only when emitted == accepted + 1 (a round cut by EOS or the token limit may leave it out); null on "
           "a server's rounds", nullable=True),
        _c("cache_hit", pa.bool_(), "ssd: proposal came from the speculation cache; null "
           "outside ssd", nullable=True),
        _c("backup", _STR, "ssd miss: backup that made the proposal (jit, fast, ...); null "
           "otherwise", nullable=True),
        _c("fan_out_total", _I32, "ssd: branches built for this sequence (sum of F_k); null "
           "outside ssd", nullable=True),
        _c("acceptance", _STR, "how this round accepted drafts: 'exact' (a real acceptance rule: ssdbench's, or "
           "a serving engine's on its reported rounds) or 'synthetic:RATE[,hit=H]' (--acceptance: a timing aid; "
           "accepted counts are drawn, outputs are not the target's). ar's rounds are always exact"),
        _c("counted_by", _STR, "who counted this round: 'ssdbench' (its decode loop ran and timed it) or "
           "'server: <response field>' (a serving engine's per-step report, e.g. vLLM's per_step_accepted: "
           "counts only; its times, batch, row and bonus token are null, never made up)"),
        _c("t_start_ns", _I64, "round start, time.time_ns(); null on a server's rounds", nullable=True),
        _c("draft_ms", _F64, "time the verifier spent drafting (sd, ssd jit backup); null on a server's rounds",
           nullable=True),
        _c("verify_ms", _F64, "target forward and acceptance; null on a server's rounds", nullable=True),
        _c("wait_ms", _F64, "time the verifier waited for a proposal; null on a server's rounds", nullable=True),
        _c("sample_ms", _F64, "sampling and acceptance-rule time; null on a server's rounds", nullable=True),
        _c("step_ms", _F64, "whole round, wall time; null on a server's rounds", nullable=True),
    ),
    "requests": _REQUEST_KEY + (
        _c("batch_size", _I32, "sequences decoded together with this request (1 for the transformers "
           "baselines, which run one request at a time)"),
        _c("seed", _I64, "seed of the request's torch.Generator"),
        _c("temperature", _F64, "target sampling temperature (0 = greedy)"),
        _c("prompt_tokens", _I32, "prompt length in tokens"),
        _c("new_tokens", _I32, "tokens generated, first token included"),
        _c("ttft_ms", _F64, "request start to first committed token"),
        _c("decode_ms", _F64, "first token to request end", nullable=True),
        _c("tpot_ms", _F64, "decode_ms / (new_tokens - 1); null when new_tokens < 2",
           nullable=True),
        _c("decode_tokens_per_s", _F64, "(new_tokens - 1) / decode time; null when "
           "new_tokens < 2", nullable=True),
        _c("rounds", _I32, "verify rounds after prefill"),
        _c("finish_reason", _STR, "why generation stopped: eos or length (a server's requests also: stop, a stop string; abort, the client left)"),
        _c("prompt_token_ids", pa.list_(_I32), "prompt token ids"),
        _c("output_token_ids", pa.list_(_I32), "generated token ids"),
    ),
    "gpu": (
        _c("t_ns", _I64, "sample time, time.time_ns()"),
        _c("device_index", _I32, "NVML device index"),
        _c("role", _STR, "what the device ran (target, draft, ...)"),
        _c("util_pct", _F64, "GPU utilisation over NVML's last sample period",
           nullable=True),
        _c("mem_mib", _F64, "device memory in use", nullable=True),
        _c("power_w", _F64, "power draw", nullable=True),
        _c("energy_mj", _F64, "energy since driver load; null where unsupported",
           nullable=True),
        _c("sm_clock_mhz", _F64, "SM clock", nullable=True),
    ),
    "endpoints": _REQUEST_KEY + (  # one row per request sent to a serving engine (--endpoint), failed ones too
        _c("concurrency", _I32, "requests the client kept in flight (--concurrency)"),
        _c("status", _STR, "ok, or failed (the request has no row in requests; error says why)"),
        _c("error", _STR, "why the request failed; null when it did not", nullable=True),
        _c("url", _STR, "the endpoint's base URL (never with credentials)"),
        _c("model", _STR, "model the server named in its answer (where its chunks name several, the first unlike "
           "model_asked)", nullable=True),
        _c("model_asked", _STR, "model the request asked for (the one /v1/models listed, or --endpoint-model); "
           "the run warns where the answers named another", nullable=True),
        _c("t_start_ns", _I64, "request sent, time.time_ns()"),
        _c("text", _STR, "the generated text as streamed", nullable=True),
        _c("server_finish_reason", _STR, "finish reason as the server gave it (stop, length, ...)", nullable=True),
        _c("token_source", _STR, "where requests.output_token_ids (and chunk_tokens) came from: server (ids it sent) "
           "or tokenizer (the target's tokenizer on the streamed text: then identity with ar is judged on the text, "
           "text_matches_ar)", nullable=True),
        _c("completion_tokens", _I32, "tokens generated as the server counted them (usage)", nullable=True),
        _c("server_prompt_tokens", _I32, "prompt tokens as the server counted them (usage); with --endpoint-api "
           "chat the server templated the prompt itself, and a count unlike requests.prompt_tokens means it "
           "templated differently", nullable=True),
        _c("cached_prompt_tokens", _I32, "prompt tokens the server took from its prefix cache "
           "(usage.prompt_tokens_details.cached_tokens); not 0 means the request did not prefill its whole prompt "
           "(the run warns); null where the server does not say", nullable=True),
        _c("chunk_offsets_ms", pa.list_(_F64), "arrival of each streamed chunk carrying output, from request "
           "start (differences are the inter-chunk times)", nullable=True),
        _c("chunk_tokens", pa.list_(_I32), "tokens each chunk carried (a speculating server may send several "
           "at once)", nullable=True),
        _c("acceptance_source", _STR, "the response field the acceptance figures were read from; null when "
           "the server gave none", nullable=True),
        _c("draft_tokens", _I64, "draft tokens proposed over the request", nullable=True),
        _c("accepted_tokens", _I64, "of those, accepted", nullable=True),
        _c("verify_steps", _I64, "target verify steps; null where the engine does not count them (llama.cpp "
           "without --metrics)",
           nullable=True),
        _c("acceptance_length", _F64, "tokens per verify step, bonus included, as the engine reports it",
           nullable=True),
        _c("accepted_per_step", pa.list_(_I32), "accepted drafts per verify step, where the engine gives them",
           nullable=True),
        _c("accepted_per_position", pa.list_(_I32), "accepted drafts at each draft position over the request "
           "(position 0 first), where the engine counts them (the /metrics per-position counters)", nullable=True),
        _c("acceptance_note", _STR, "why the /metrics counters were not used for this request (other traffic "
           "moved them, unreadable, disagreeing), where they were read; null otherwise", nullable=True),
        _c("acceptance_invalid", _STR, "why the engine's speculation figures cannot be true (a wrong type, accepted "
           "above drafted, per-step counts unlike the steps, a NaN mean): then every figure column is null; null "
           "when they were valid or absent", nullable=True),
        _c("target_passes", _I64, "target forward passes behind the request, prefill included: completion_tokens "
           "minus accepted_tokens (each pass commits one token beside the drafts it accepted); null where the "
           "accepted drafts are unknown", nullable=True),
        _c("text_matches_ar", pa.bool_(), "greedy, where token_source is tokenizer: whether the text equals ar's "
           "output decoded on the same prompt and repeat; null where the server sent ids or no ar ran",
           nullable=True),
    ),
    "events": (
        _c("run_id", _STR, "run identifier"),
        _c("method", _STR, "decoding method whose process recorded the event (ssd)"),
        _c("role", _STR, "draft or target"),
        _c("kind", _STR, "glue, tree, backup, answer, prefill"),
        _c("t_start_ns", _I64, "start, time.time_ns()"),
        _c("t_end_ns", _I64, "end, time.time_ns()"),
    ),
}

DESCRIPTIONS: dict[str, dict[str, str]] = {
    table: {col.name: col.description for col in cols} for table, cols in COLUMNS.items()
}


def _check_table(name: str) -> tuple[Column, ...]:
    if name not in COLUMNS:
        raise SchemaError(f"unknown table {name!r}; tables: {', '.join(TABLE_NAMES + OPTIONAL_TABLE_NAMES)}")
    return COLUMNS[name]


def schema_for(name: str, *, version: int = SCHEMA_VERSION) -> pa.Schema:
    """Arrow schema of table `name`, with the schema version in its metadata."""
    fields = [pa.field(c.name, c.type, nullable=c.nullable) for c in _check_table(name)]
    meta = {VERSION_KEY: str(version).encode(), TABLE_KEY: name.encode()}
    return pa.schema(fields, metadata=meta)


def _check_names(name: str, given: Sequence[str]) -> None:
    known = [c.name for c in _check_table(name)]
    unknown = [n for n in given if n not in known]
    if unknown:
        hints = [f"{n!r} (did you mean {m[0]!r}?)" if (m := difflib.get_close_matches(
            n, known, n=1)) else repr(n) for n in unknown]
        raise SchemaError(f"unknown column(s) for table {name!r}: {', '.join(hints)}")
    missing = [n for n in known if n not in given]
    if missing:
        raise SchemaError(f"missing column(s) for table {name!r}: {', '.join(missing)}")


def table_from_columns(name: str, columns: Mapping[str, Sequence]) -> pa.Table:
    """Build table `name` from column lists, checking names, lengths, types and nulls.

    An empty mapping (nothing was recorded) gives an empty table.
    """
    if not columns:
        return empty_table(name)
    _check_names(name, list(columns))
    schema = schema_for(name)
    lengths = {len(columns[f.name]) for f in schema}
    if len(lengths) > 1:
        sizes = ", ".join(f"{f.name}={len(columns[f.name])}" for f in schema)
        raise SchemaError(f"columns of table {name!r} differ in length: {sizes}")
    arrays = []
    for field in schema:
        try:
            array = pa.array(columns[field.name], type=field.type)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as err:
            raise SchemaError(f"column {name}.{field.name}: {err}") from None
        if not field.nullable and array.null_count:
            raise SchemaError(f"column {name}.{field.name} is not nullable but holds "
                              f"{array.null_count} null(s)")
        arrays.append(array)
    return pa.Table.from_arrays(arrays, schema=schema)


def table_from_rows(name: str, rows: Sequence[Mapping]) -> pa.Table:
    """Build table `name` from row dicts (e.g. GPU samples); no rows gives an empty table."""
    names = [c.name for c in _check_table(name)]
    expected = set(names)
    for row in rows:
        if row.keys() != expected:
            _check_names(name, list(row))
    return table_from_columns(name, {n: [row[n] for row in rows] for n in names})


def empty_table(name: str) -> pa.Table:
    return schema_for(name).empty_table()
