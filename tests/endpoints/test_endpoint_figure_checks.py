"""Speculation figures that cannot be true, through `ssdbench run` in a subprocess against a server on
127.0.0.1: recorded as invalid with the reason (endpoints.acceptance_invalid, every figure null), never
printed as measured, the request itself kept; and the note on a missing acceptance length names the engine
the figures came from (issue 32: a vLLM source's note blamed llama-server)."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from misbehaving_server import good_events, run_against, sse

VLLM = "vllm metrics.speculative_decoding"


def with_final(**fields) -> bytes:
    """The good stream, its final usage chunk carrying `fields` (as vLLM and llama-server put them there)."""
    events = good_events()
    events[-1].update(fields)
    return sse(events)


def vllm(**spec) -> bytes:
    return with_final(metrics={"speculative_decoding": spec})


ISSUE_CASE = dict(num_spec_steps=0, num_draft_tokens=5, num_accepted_draft_tokens=9, per_step_accepted=[3, 3, 3])
TRUE = dict(num_spec_steps=2, num_draft_tokens=4, num_accepted_draft_tokens=2, mean_acceptance_length=2.0,
            per_step_accepted=[1, 1], per_step_drafted=[2, 2])


@pytest.mark.parametrize("answer, why", [
    (vllm(**ISSUE_CASE, mean_acceptance_length=math.nan),
     "metrics.speculative_decoding.mean_acceptance_length: expected a finite number, got float NaN"),
    (vllm(**ISSUE_CASE, mean_acceptance_length=4.0),
     "9 accepted of 5 drafted tokens; 5 drafted tokens in 0 verify steps; "
     "3 per-step accepted counts for 0 verify steps"),
    (vllm(**{**TRUE, "mean_acceptance_length": 3.5}), "mean acceptance length 3.5 where 2 accepted in 2 steps make 2"),
    (vllm(**{**TRUE, "per_step_drafted": [2, 0]}),
     "per-step drafted counts sum to 2, not the 4 drafted; a step accepted more drafts than it drafted"),
    (vllm(**{**TRUE, "num_draft_tokens": -4}),
     "metrics.speculative_decoding.num_draft_tokens: expected a whole number from 0 to 2147483647, got int -4"),
    (vllm(**{**TRUE, "per_step_accepted": "1,1"}),
     "metrics.speculative_decoding.per_step_accepted: expected a list of counts, got string '1,1'"),
])
def test_figures_that_cannot_be_true_are_recorded_invalid_and_not_printed(tmp_path, answer, why):
    outcome = run_against(tmp_path, good=answer)
    assert outcome.returncode == 0 and outcome.last_error is None
    assert "2/2 requests ok" in outcome.stdout and "draft acceptance rate" not in outcome.stdout
    assert "per drafted step" not in outcome.stdout  # no acceptance length printed as measured
    assert f"figures of 2/2 responses invalid, not used (endpoints.acceptance_invalid): {why} [from {VLLM}]" \
        in outcome.stdout
    for row in outcome.rows:
        assert row["status"] == "ok" and row["acceptance_invalid"] == why and row["acceptance_source"] == VLLM
        assert all(pd.isna(row[c]) for c in ("draft_tokens", "accepted_tokens", "verify_steps", "acceptance_length"))
        assert row["accepted_per_step"] is None


def test_one_invalid_response_leaves_the_others_figures_measured(tmp_path):
    outcome = run_against(tmp_path, good=vllm(**TRUE), bad=vllm(**{**TRUE, "num_accepted_draft_tokens": 7}))
    invalid, valid = outcome.rows
    assert invalid["acceptance_invalid"].startswith("7 accepted of 4 drafted tokens")
    assert (valid["draft_tokens"], valid["accepted_tokens"], valid["verify_steps"]) == (4, 2, 2)
    assert pd.isna(valid["acceptance_invalid"])
    assert ("draft acceptance rate 0.500 pooled, 0.500 median per request; acceptance length 2.00 per drafted step "
            f"(mean per request; the steps that drafted, as vLLM and aiperf count it) [from {VLLM}]; figures of 1/2 "
            "responses invalid") in outcome.stdout


@pytest.mark.parametrize("answer, note", [
    (with_final(timings={"draft_n": 4, "draft_n_accepted": 2}),
     "no acceptance length where llama.cpp's responses count no verify steps; llama-server started with --metrics"),
    (vllm(num_draft_tokens=4, num_accepted_draft_tokens=2),
     "no acceptance length where vLLM's metrics.speculative_decoding gave no num_spec_steps [from vllm"),
])
def test_a_missing_acceptance_length_is_said_in_the_engines_own_terms(tmp_path, answer, note):
    outcome = run_against(tmp_path, good=answer)
    assert outcome.returncode == 0 and "draft acceptance rate 0.500 pooled" in outcome.stdout
    assert note in outcome.stdout
    assert ("llama-server" in outcome.stdout) == note.startswith("no acceptance length where llama.cpp")
