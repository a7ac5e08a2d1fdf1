"""The endpoints table → per-variant acceptance and streaming figures (DataFrame in, lines out).

Acceptance is pooled over requests (Σ accepted / Σ drafted) and also given per request; an
acceptance length only where the engine counts verify steps, never derived from a rate.
"""

from __future__ import annotations

import pandas as pd


def per_variant(endpoints: pd.DataFrame) -> list[dict]:
    """One row per endpoint variant: requests, failures, acceptance, tokens per chunk."""
    if endpoints.empty:
        return []
    rows = []
    for (method, engine), group in endpoints.groupby(["method", "engine"], sort=False):
        ok = group[group["status"] == "ok"]
        drafted = pd.to_numeric(ok["draft_tokens"], errors="coerce")
        accepted = pd.to_numeric(ok["accepted_tokens"], errors="coerce")
        rates = (accepted / drafted.where(drafted > 0)).dropna()
        lengths = pd.to_numeric(ok["acceptance_length"], errors="coerce").dropna()
        chunk_tokens = [n for chunks in ok["chunk_tokens"] if chunks is not None for n in chunks]
        sources = sorted({s for s in ok["acceptance_source"] if isinstance(s, str)})
        rows.append({
            "label": f"{method}@{engine}", "requests": len(group), "failed": int((group["status"] != "ok").sum()),
            "acceptance_source": ", ".join(sources) or None,
            "draft_acceptance_rate": float(accepted.sum() / drafted.sum()) if drafted.sum() > 0 else None,
            "rate_per_request_median": float(rates.median()) if len(rates) else None,
            "acceptance_length": float(lengths.mean()) if len(lengths) else None,
            "tokens_per_chunk": float(sum(chunk_tokens) / len(chunk_tokens)) if chunk_tokens else None,
        })
    return rows


def acceptance_lines(endpoints: pd.DataFrame) -> list[str]:
    lines = []
    for row in per_variant(endpoints):
        line = f"{row['label']}: {row['requests'] - row['failed']}/{row['requests']} requests ok"
        if row["tokens_per_chunk"] is not None:
            line += f", {row['tokens_per_chunk']:.2f} tokens per streamed chunk"
        if row["acceptance_source"] is None:
            lines.append(line + "; no acceptance figures in its responses (no speculation, or none reported)")
            continue
        if row["draft_acceptance_rate"] is not None and row["rate_per_request_median"] is not None:
            line += (f"; draft acceptance rate {row['draft_acceptance_rate']:.3f} pooled, "
                     f"{row['rate_per_request_median']:.3f} median per request")
        if row["acceptance_length"] is not None:
            line += f"; acceptance length {row['acceptance_length']:.2f} (mean per request)"
        else:
            line += "; no acceptance length (no verify steps reported; llama-server reports them with --metrics)"
        lines.append(f"{line} [from {row['acceptance_source']}]")
    return lines


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
