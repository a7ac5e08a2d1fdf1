"""/metrics counters that are no counts, through `ssdbench run` in a subprocess against a server on 127.0.0.1
with llama-server's counter names: NaN and +Inf (which crashed the run with `internal error` before, issue
32), negative values, a counter that goes down, a draft position far past any draft, more accepted than
drafted. The requests are kept; the counters are refused, and why, naming the engine's counters, is in
endpoints.acceptance_note."""

from __future__ import annotations

import pandas as pd
import pytest

from misbehaving_server import run_against

REFUSED = "/metrics (llamacpp:spec_decode_*) refused: "


def llama_metrics(generated, drafted, accepted, drafts, position: str = "0") -> str:
    return "\n".join([
        "# TYPE llamacpp:tokens_predicted_total counter", f"llamacpp:tokens_predicted_total {generated}",
        f"llamacpp:spec_decode_num_draft_tokens_total {drafted}",
        f"llamacpp:spec_decode_num_accepted_tokens_total {accepted}",
        f"llamacpp:spec_decode_num_drafts_total {drafts}",
        f'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{{position="{position}"}} {accepted}']) + "\n"


def counting(posts: int) -> tuple[int, int, int, int]:
    """Counters that count each request's 3 tokens, 2 drafted, 1 accepted, 1 verify step."""
    return 100 + 3 * posts, 2 * posts, posts, posts


@pytest.mark.parametrize("metrics, why", [
    (lambda posts: llama_metrics(100 + 3 * posts, "NaN", "NaN", 5),
     "llamacpp:spec_decode_num_draft_tokens is nan, not a count"),
    (lambda posts: llama_metrics("+Inf", 4, 2, 2), "llamacpp:tokens_predicted is inf, not a count"),
    (lambda posts: llama_metrics(100 + 3 * posts, -4, 2, 2),
     "llamacpp:spec_decode_num_draft_tokens is -4, not a count"),
    (lambda posts: llama_metrics(*counting(posts)[:3], 50 - posts),
     "llamacpp:spec_decode_num_drafts went down from 49 to 48 (the server restarted or reset its counters)"),
    (lambda posts: llama_metrics(100 + 3 * posts, 2 * posts, 3 * posts, posts), "3 accepted of 2 drafted tokens"),
    (lambda posts: llama_metrics(*counting(posts), position="99999999999"),
     'llamacpp:spec_decode_num_accepted_tokens_per_pos{position="99999999999"} is past the 256 draft positions read'),
])
def test_counters_that_are_no_counts_are_refused_and_the_requests_kept(tmp_path, metrics, why):
    outcome = run_against(tmp_path, metrics=metrics)
    assert outcome.returncode == 0 and outcome.last_error is None
    assert "f@endpoint-c1: 2/2 requests ok" in outcome.stdout
    first, second = outcome.rows  # the note of the first measured request, in full
    assert first["acceptance_note"] == REFUSED + why and second["acceptance_note"].startswith(REFUSED)
    for row in outcome.rows:
        assert row["status"] == "ok" and pd.isna(row["acceptance_source"])


def test_counters_that_count_are_taken(tmp_path):
    outcome = run_against(tmp_path, metrics=lambda posts: llama_metrics(*counting(posts)))
    assert outcome.returncode == 0
    for row in outcome.rows:
        assert row["acceptance_source"] == "prometheus /metrics (llamacpp:spec_decode_*)"
        assert (row["draft_tokens"], row["accepted_tokens"], row["verify_steps"]) == (2, 1, 1)
        assert pd.isna(row["acceptance_note"])
