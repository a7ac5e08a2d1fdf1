"""Tokens per streamed chunk, counted from the server's own numbers where it gives them, with the source named.

A speculating server may send several tokens in one chunk, so tokens per chunk shows how it streams. Counted,
best first, per request:
- the server's token ids in each chunk (vLLM with `return_token_ids`): exact, chunk by chunk;
- the server's usage count (`usage.completion_tokens`) over the chunks that carried output: a mean, exact over
  the request, where the chunks carried text only (llama-server's OpenAI routes);
- the target's tokenizer on each chunk's text: only where the server counted nothing, and labelled so (text
  re-tokenised chunk by chunk need not give the server's tokens).
"""

from __future__ import annotations

import pandas as pd

SERVER_IDS, USAGE, RETOKENISED = "the server's token ids", "the server's usage count", "re-tokenised text"


def counted(row: pd.Series) -> tuple[int, int, str] | None:
    """(tokens, chunks, source) of one ok request; None where it streamed no chunk with output."""
    chunks = row["chunk_tokens"]
    if chunks is None or len(chunks) == 0:
        return None
    if row["token_source"] == "server":
        return int(sum(chunks)), len(chunks), SERVER_IDS
    if not pd.isna(row["completion_tokens"]):
        return int(row["completion_tokens"]), len(chunks), USAGE
    return int(sum(chunks)), len(chunks), RETOKENISED


def tokens_per_chunk(ok: pd.DataFrame) -> tuple[float | None, str | None]:
    """(tokens per streamed chunk pooled over the requests, the sources they were counted from)."""
    found = [c for c in (counted(row) for _, row in ok.iterrows()) if c is not None]
    chunks = sum(c[1] for c in found)
    if not chunks:
        return None, None
    sources = [s for s in (SERVER_IDS, USAGE, RETOKENISED) if any(c[2] == s for c in found)]
    return sum(c[0] for c in found) / chunks, " and ".join(sources)
