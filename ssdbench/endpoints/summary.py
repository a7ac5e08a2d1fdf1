"""The endpoints table → per-variant acceptance and streaming figures (DataFrame in, lines out).

Acceptance is pooled over requests (Σ accepted / Σ drafted) and also given per request; an
acceptance length only where the engine counts verify steps, never derived from a rate.
"""

from __future__ import annotations

import pandas as pd

from ssdbench.endpoints.chunk_tokens import tokens_per_chunk
from ssdbench.endpoints.engines.registry import engine_of_source, engine_reading


def no_steps_note(source: str) -> str:
    """Why a source's figures have no acceptance length, in the words of the engine it belongs to."""
    engine = engine_of_source(source)
    return engine.no_steps_note if engine is not None and engine.no_steps_note else f"{source} counts no verify steps"


def length_phrase(source: str | None) -> str:
    """What the acceptance length of a variant's source is per: the engine's own words, else a drafted step."""
    engine = engine_reading(source) if source else None
    if engine is not None and engine.length_phrase:
        return engine.length_phrase
    return "per drafted step (mean per request; the steps that drafted, as vLLM and aiperf count it)"


def per_variant(endpoints: pd.DataFrame) -> list[dict]:
    """One row per endpoint variant: requests, failures, acceptance, tokens per chunk."""
    if endpoints.empty:
        return []
    rows = []
    for (method, engine), group in endpoints.groupby(["method", "engine"], sort=False):
        ok = group[group["status"] == "ok"]
        is_invalid = ok["acceptance_invalid"].notna() if "acceptance_invalid" in ok else pd.Series(False, ok.index)
        valid = ok[~is_invalid]
        drafted = pd.to_numeric(valid["draft_tokens"], errors="coerce")
        accepted = pd.to_numeric(valid["accepted_tokens"], errors="coerce")
        rates = (accepted / drafted.where(drafted > 0)).dropna()
        lengths = pd.to_numeric(valid["acceptance_length"], errors="coerce")
        per_chunk, chunk_source = tokens_per_chunk(ok)
        sources = sorted({s for s in valid["acceptance_source"] if isinstance(s, str)})
        no_length = {s for s, n in zip(valid["acceptance_source"], lengths) if isinstance(s, str) and pd.isna(n)}
        rows.append({
            "label": f"{method}@{engine}", "requests": len(group), "failed": int((group["status"] != "ok").sum()),
            "acceptance_source": ", ".join(sources) or None,
            "draft_acceptance_rate": float(accepted.sum() / drafted.sum()) if drafted.sum() > 0 else None,
            "rate_per_request_median": float(rates.median()) if len(rates) else None,
            "acceptance_length": float(lengths.dropna().mean()) if lengths.notna().any() else None,
            "no_length_notes": sorted({no_steps_note(s) for s in no_length}),
            "tokens_per_chunk": per_chunk, "tokens_per_chunk_source": chunk_source,
            "tokens_per_target_pass": tokens_per_target_pass(valid),
            "invalid": list(zip(ok["acceptance_source"][is_invalid], ok["acceptance_invalid"][is_invalid])),
        })
    return rows


def tokens_per_target_pass(valid: pd.DataFrame) -> float | None:
    """Decode tokens over decode target passes, pooled: (completion tokens - 1) / (target passes - 1), the
    prefill's pass and its token left out, as ssdbench's methods count their acceptance length (mean tokens per
    round). None where no request's passes are known (`endpoints.target_passes`)."""
    if "target_passes" not in valid:
        return None
    passes = pd.to_numeric(valid["target_passes"], errors="coerce")
    tokens = pd.to_numeric(valid["completion_tokens"], errors="coerce")
    known = passes.notna() & tokens.notna() & (passes > 1)
    return float((tokens[known] - 1).sum() / (passes[known] - 1).sum()) if known.any() else None


def acceptance_lines(endpoints: pd.DataFrame) -> list[str]:
    lines = []
    for row in per_variant(endpoints):
        ok = row["requests"] - row["failed"]
        line = f"{row['label']}: {ok}/{row['requests']} requests ok"
        if row["tokens_per_chunk"] is not None:
            line += f", {row['tokens_per_chunk']:.2f} tokens per streamed chunk (from {row['tokens_per_chunk_source']})"
        if row["acceptance_source"] is None and not row["invalid"]:
            lines.append(line + "; no acceptance figures in its responses (no speculation, or none reported)")
            continue
        if row["acceptance_source"] is not None:
            line += _figures(row)
        if row["invalid"]:
            line += _invalid(row["invalid"], ok)
        lines.append(line)
    return lines


def _figures(row: dict) -> str:
    text = ""
    if row["draft_acceptance_rate"] is not None and row["rate_per_request_median"] is not None:
        text += (f"; draft acceptance rate {row['draft_acceptance_rate']:.3f} pooled, "
                 f"{row['rate_per_request_median']:.3f} median per request")
    if row["acceptance_length"] is not None:
        text += f"; acceptance length {row['acceptance_length']:.2f} {length_phrase(row['acceptance_source'])}"
    if row["tokens_per_target_pass"] is not None:
        text += (f"; {row['tokens_per_target_pass']:.2f} tokens per target pass (completion tokens over target "
                 "passes, comparable with ssdbench's accept len)")
    if row["no_length_notes"]:
        text += f"; no acceptance length where {'; '.join(row['no_length_notes'])}"
    return f"{text} [from {row['acceptance_source']}]"


def _invalid(invalid: list[tuple[str, str]], ok: int) -> str:
    """The responses whose figures could not be true: how many, and the first one's reason and source."""
    source, why = invalid[0]
    return (f"; figures of {len(invalid)}/{ok} responses invalid, not used (endpoints.acceptance_invalid): "
            f"{why} [from {source}]")


def prompt_token_warnings(endpoints: pd.DataFrame, requests: pd.DataFrame) -> list[str]:
    """One line per endpoint variant whose server counted other prompt lengths than the methods' ids:
    with `--endpoint-api chat` it templated the conversation differently (or added tokens of its own),
    so its requests are not quite the methods' prompts."""
    if endpoints.empty or "server_prompt_tokens" not in endpoints or requests.empty:
        return []
    keys = ["method", "engine", "prompt_id", "request_idx", "repeat"]
    both = endpoints[endpoints["status"] == "ok"].merge(requests[keys + ["prompt_tokens"]], on=keys)
    both = both[both["server_prompt_tokens"].notna()]
    lines = []
    for (method, engine), group in both.groupby(["method", "engine"], sort=False):
        differing = group[group["server_prompt_tokens"] != group["prompt_tokens"]]
        if differing.empty:
            continue
        first = differing.iloc[0]
        lines.append(f"warning: {method}@{engine}: the server counted {int(first['server_prompt_tokens'])} prompt "
                     f"tokens where ssdbench's prompt has {int(first['prompt_tokens'])} ({len(differing)}/{len(group)} "
                     "requests differ): it templated the prompt differently; both counts are recorded "
                     "(endpoints.server_prompt_tokens, requests.prompt_tokens)")
    return lines


def model_warnings(endpoints: pd.DataFrame) -> list[str]:
    """One line per endpoint variant whose answers named another model than the one asked for: a proxy or
    router may have sent the requests elsewhere, so they may not measure the model listed."""
    if endpoints.empty or "model_asked" not in endpoints:
        return []
    named = endpoints[(endpoints["status"] == "ok") & endpoints["model"].notna() & endpoints["model_asked"].notna()]
    lines = []
    for (method, engine), group in named.groupby(["method", "engine"], sort=False):
        differing = group[group["model"] != group["model_asked"]]
        if differing.empty:
            continue
        first = differing.iloc[0]
        lines.append(f"warning: {method}@{engine}: the server answered as model '{first['model']}' where "
                     f"'{first['model_asked']}' was asked for ({len(differing)}/{len(group)} requests); both are "
                     "recorded (endpoints.model, endpoints.model_asked)")
    return lines


def cached_prompt_warnings(endpoints: pd.DataFrame) -> list[str]:
    """One line per endpoint variant whose server took prompt tokens from its prefix cache: those requests did not
    prefill their whole prompt, so their TTFT is not the methods'."""
    if endpoints.empty or "cached_prompt_tokens" not in endpoints:
        return []
    ok = endpoints[endpoints["status"] == "ok"]
    lines = []
    for (method, engine), group in ok.groupby(["method", "engine"], sort=False):
        cached = pd.to_numeric(group["cached_prompt_tokens"], errors="coerce")
        hit = group[cached > 0]
        if hit.empty:
            continue
        first = hit.iloc[0]
        lines.append(f"warning: {method}@{engine}: {len(hit)}/{len(group)} requests found prompt tokens in the "
                     f"server's prefix cache (prompt {first['prompt_id']}: {int(first['cached_prompt_tokens'])} "
                     "cached): their TTFT leaves out prefilling those tokens; recorded in "
                     "endpoints.cached_prompt_tokens")
    return lines


def table_figures(endpoints: pd.DataFrame) -> dict[str, dict]:
    """Per endpoint variant, the acceptance figures the run's table shows: its responses' (or the /metrics
    fallback's) acceptance length and pooled draft acceptance rate, and tokens per target pass."""
    return {row["label"]: {"acceptance_length": row["acceptance_length"],
                           "draft_acceptance_rate": row["draft_acceptance_rate"],
                           "tokens_per_target_pass": row["tokens_per_target_pass"]} for row in per_variant(endpoints)}
