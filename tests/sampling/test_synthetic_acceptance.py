"""--acceptance synthetic:RATE[,hit=H]: drafts accepted by seeded coin flips, for timing random-weight pairs.

The real round loop, proposers and draft process run; only the accepted count is drawn (and, with
hit=H, ssd's bonus token steered onto its cache). Runs must say their outputs are not the target's.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
import torch
from cli_checks import assert_one_line_error
from decode_helpers import decode, make_proposer, sampling_rows, ssd_local
from tests.speculation.test_ssd_process import target_model
from tiny_models import tiny_pair
from typer.testing import CliRunner

from ssdbench.cli.main import app
from ssdbench.sampling.acceptance_setting import SyntheticAcceptance, parse_acceptance
from ssdbench.sampling.synthetic import SyntheticRule

runner = CliRunner()
K = 4
PROMPTS = [[5, 9, 13, 5, 9], [3, 3, 8], [40, 41, 42, 43], [2, 6, 10], [7], [11, 12, 11, 12]]


def expected_accepted(rate: float, proposed: int) -> float:
    """E[leading successes] of `proposed` Bernoulli(rate) trials: sum_i rate^i (truncated geometric)."""
    return sum(rate**i for i in range(1, proposed + 1))


def synthetic_sd_steps(pair, rate: float, *, temperature: float = 0.0, seed: int = 0):
    target, draft = pair
    generator = torch.Generator().manual_seed(seed)
    proposer = make_proposer("draft", draft, k=K, num_rows=len(PROMPTS), generator=generator)
    rule = SyntheticRule(SyntheticAcceptance(rate), seed=seed)
    return decode(target, proposer, PROMPTS, max_new_tokens=96, k=K, temperature=temperature, generator=generator,
                  verify=rule)


@pytest.fixture(scope="module")
def pair():
    return tiny_pair(vocab=48, seed=3, draft="other")  # unrelated weights: the exact rule accepts almost nothing


@pytest.mark.parametrize("rate", [0.3, 0.8])
def test_sd_accepted_length_follows_the_rate(pair, rate, one_thread):
    _, steps = synthetic_sd_steps(pair, rate)
    accepted = torch.tensor([s.accepted for s in steps], dtype=torch.float64)
    expected = torch.tensor([expected_accepted(rate, s.proposed) for s in steps], dtype=torch.float64)
    other = 1.1 - rate  # 0.8 <-> 0.3: the test must tell the two apart
    wrong = torch.tensor([expected_accepted(other, s.proposed) for s in steps], dtype=torch.float64)
    standard_error = float((accepted - expected).std()) / math.sqrt(len(steps))
    assert len(steps) > 100
    assert abs(float(accepted.mean() - expected.mean())) < 4 * standard_error
    assert abs(float(accepted.mean() - wrong.mean())) > 10 * standard_error


def test_rate_one_accepts_every_drafted_token(pair, one_thread):
    _, steps = synthetic_sd_steps(pair, 1.0, temperature=0.7)
    assert steps and all(s.accepted == s.proposed == K for s in steps if s.emitted == K + 1)
    assert all(s.accepted == s.proposed for s in steps)


def test_the_token_after_the_prefix_is_the_targets():
    """Greedy: the argmax at the accepted count, the rejected draft excluded (as the exact rule's residual
    excludes it); sampled: a draw from p there (never a token with p = 0)."""
    logits = torch.randn(3, K + 1, 10)  # [B, K+1, V]
    tokens = logits[:, :K].argmax(dim=-1)  # [B, K]: drafts the target likes best, so a rejection must skip them
    proposed = torch.tensor([4, 2, 0])
    rule = SyntheticRule(SyntheticAcceptance(0.6), seed=1)
    verdict = rule(logits, tokens, None, proposed, sampling_rows(3, 0.0), None)
    assert (verdict.num_accepted <= proposed).all()
    for b, n in enumerate(verdict.num_accepted.tolist()):
        ranked = logits[b, n].argsort(descending=True).tolist()
        rejected = n < int(proposed[b])
        assert verdict.next_token[b] == (ranked[1] if rejected else ranked[0])
    masked = logits.clone()
    masked[:, :, 5:] = -math.inf  # the target gives tokens 5.. no mass anywhere
    sampled = SyntheticRule(SyntheticAcceptance(0.6), seed=1)(masked, tokens, None, proposed, sampling_rows(3, 1.0),
                                                                torch.Generator().manual_seed(0))
    assert (sampled.next_token < 5).all()
    again = SyntheticRule(SyntheticAcceptance(0.6), seed=1)(logits, tokens, None, proposed, sampling_rows(3, 0.0), None)
    assert again.num_accepted.tolist() == verdict.num_accepted.tolist()  # seeded: reproducible


def test_local_ssd_hits_about_as_often_as_h(pair, one_thread):
    """In-process speculator: the bonus is steered onto the cache with probability H, so hits follow H."""
    target, draft = pair
    proposer = ssd_local(draft, k=3, num_rows=4, fan_out="2", fan_out_list="2,2,2,2", miss_list="2,2,2,2")
    rule = SyntheticRule(SyntheticAcceptance(0.7, hit=0.6), seed=0, held_bonuses=proposer.held_bonuses)
    _, steps = decode(target, proposer, PROMPTS[:4], max_new_tokens=96, k=3, verify=rule)
    later = [s for s in steps if s.round > 1]  # a sequence's first round follows the prefill: no steering, a miss
    hit_rate = sum(s.extras["cache_hit"] for s in later) / len(later)
    assert abs(hit_rate - 0.6) < 4 * math.sqrt(0.6 * 0.4 / len(later)), hit_rate


def test_remote_ssd_runs_through_the_draft_process_and_hits_about_h(tmp_path, one_thread):
    from cli_fixtures import save_tiny_model
    from tests.speculation.test_ssd_process import spec_for

    from ssdbench.speculation.client import DraftServer, RemoteSsdProposer

    folder = save_tiny_model(tmp_path / "tiny", vocab=64, seed=2)
    unrelated = save_tiny_model(tmp_path / "draft", vocab=64, seed=7)  # never predicts the target's token itself
    target = target_model(folder)
    spec = dataclasses.replace(spec_for(folder, k=3, int8=False, model_path=str(unrelated)), posts_forks=True)
    with DraftServer(spec, num_rows=4, max_prompt=8, vocab_size=64, with_q=False) as server:
        proposer = RemoteSsdProposer(server, sampling_rows(4, 0.0))
        rule = SyntheticRule(SyntheticAcceptance(0.7, hit=0.6), seed=0, held_bonuses=proposer.held_bonuses)
        _, steps = decode(target, proposer, PROMPTS[:4], max_new_tokens=64, k=3, verify=rule)
    later = [s for s in steps if s.round > 1]
    hit_rate = sum(s.extras["cache_hit"] for s in later) / len(later)
    # fan-out "2" moves half the budget to k = 0 after a miss, and a tree the next request cuts off before its
    # first step holds nothing: hits can only fall short of H, never exceed it (beyond noise)
    assert 0.25 < hit_rate < 0.6 + 4 * math.sqrt(0.24 / len(later)), hit_rate


# ---- through the CLI ----------------------------------------------------------------------------------------

def run_args(target: Path, out: Path, *extra: str) -> list[str]:
    return ["run", "--target", str(target), "--suite", "smoke", "--num-prompts", "3", "--max-new-tokens", "12",
            "--no-chat-template", "--k", "3", "--out", str(out), *extra]


@pytest.fixture(scope="module")
def runs(tiny, tmp_path_factory) -> dict[str, Path]:
    """An exact run and a synthetic one (ar, sd and ssd) on the same tiny model."""
    root = tmp_path_factory.mktemp("synthetic-runs")
    found = {}
    for name, extra in (("exact", ("--methods", "ar,sd")),
                        ("synthetic", ("--methods", "ar,sd,ssd", "--fan-out", "2",
                                       "--acceptance", "synthetic:0.8,hit=0.5"))):
        result = runner.invoke(app, run_args(tiny, root / name, *extra))
        assert result.exit_code == 0, result.output
        found[name] = root / name
        found[name + "_output"] = result.output
    return found


def test_a_synthetic_run_says_its_outputs_are_not_the_targets(runs):
    output = " ".join(runs["synthetic_output"].split())
    assert "synthetic acceptance" in output and "NOT the target's" in output
    assert output.count("accepted each drafted token with probability") == 1  # said once, not before and after
    assert "identical to ar" not in output and "n/a (synthetic acceptance" in output
    manifest = json.loads((runs["synthetic"] / "manifest.json").read_text())
    assert manifest["acceptance"] == "synthetic:0.8,hit=0.5" and manifest["config"]["acceptance"] == manifest["acceptance"]
    steps = pq.read_table(runs["synthetic"] / "steps.parquet").to_pandas()
    by_method = steps.groupby("method")["acceptance"].unique().to_dict()
    assert list(by_method["ar"]) == ["exact"]  # ar verifies nothing: its outputs are the target's
    assert list(by_method["sd"]) == list(by_method["ssd"]) == ["synthetic:0.8,hit=0.5"]
    ssd = steps[steps["method"] == "ssd"]
    assert ssd["cache_hit"].notna().all() and ssd["cache_hit"].any()
    exact = json.loads((runs["exact"] / "manifest.json").read_text())
    assert exact["acceptance"] == "exact"
    assert set(pq.read_table(runs["exact"] / "steps.parquet").to_pandas()["acceptance"]) == {"exact"}


def test_the_summary_claims_no_identity_for_synthetic_variants(runs):
    from ssdbench.metrics.summary import summarize
    from ssdbench.records.reader import load_run

    run = load_run(runs["synthetic"])
    summary = summarize(run.requests, run.steps).set_index("label")
    assert summary.loc["ar", "acceptance"] == "exact"
    assert summary.loc["sd", "acceptance"] == "synthetic:0.8,hit=0.5"
    assert pd.isna(summary.loc["sd", "outputs_match"]) and pd.isna(summary.loc["ssd", "outputs_match"])


def test_compare_refuses_synthetic_beside_exact(runs):
    result = runner.invoke(app, ["compare", str(runs["exact"]), str(runs["synthetic"])])
    assert_one_line_error(result, "acceptance", "synthetic:0.8")


def test_compare_of_synthetic_runs_marks_outputs_and_the_gate_refuses_outputs_match(runs):
    result = runner.invoke(app, ["compare", str(runs["synthetic"]), str(runs["synthetic"]), "--format", "markdown"])
    assert result.exit_code == 0, result.output
    assert "n/a (synthetic acceptance)" in result.output
    gated = runner.invoke(app, ["compare", "--baseline", str(runs["synthetic"]), str(runs["synthetic"]),
                                "--fail-on", "outputs_match:false"])
    assert_one_line_error(gated, "synthetic acceptance", "outputs_match")


@pytest.mark.parametrize("value,fragment", [
    ("synthetic:0", "(0, 1]"), ("synthetic:1.5", "(0, 1]"), ("synthetic:-0.2", "(0, 1]"),
    ("synthetic:abc", "number"), ("synthetic", "synthetic:RATE"), ("exactly", "synthetic:RATE"),
    ("synthetic:0.5,hit=2", "hit"), ("synthetic:nan", "finite"), ("synthetic:0.5,foo=1", "synthetic:RATE"),
])
def test_malformed_values_are_one_line(tiny, tmp_path, value, fragment):
    result = runner.invoke(app, run_args(tiny, tmp_path / "run", "--acceptance", value))
    assert_one_line_error(result, "--acceptance", fragment)
    assert not (tmp_path / "run").exists()


def test_parse_acceptance_labels():
    assert parse_acceptance("exact") is None
    assert parse_acceptance("synthetic:0.80").label == "synthetic:0.8"
    assert parse_acceptance("synthetic:1,hit=0.25") == SyntheticAcceptance(1.0, 0.25)


def test_random_weights_with_synthetic_acceptance_runs_ar_sd_and_ssd(tmp_path):
    """docs/runs.md's combination, on the smallest published shape: random pairs accept by the rate."""
    out = tmp_path / "run"
    result = runner.invoke(app, ["run", "--target", "smollm2-135m", "--random-weights", "--suite", "smoke",
                                 "--num-prompts", "1", "--max-new-tokens", "8", "--methods", "ar,sd,ssd",
                                 "--acceptance", "synthetic:1,hit=1", "--threads", "1", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "random weights" in result.output and "synthetic acceptance" in result.output
    steps = pq.read_table(out / "steps.parquet").to_pandas()
    drafted = steps[steps["method"] != "ar"]
    assert (drafted["accepted"] == drafted["proposed"]).all()  # rate 1: a random pair accepts every draft


def test_a_draft_that_may_propose_fewer_than_k_is_refused(tiny, tmp_path):
    """The n-gram lookup proposes nothing where the text has no earlier match: a made-up rate over rounds
    that drafted nothing would time nothing yet print a speedup."""
    result = runner.invoke(app, run_args(tiny, tmp_path / "run", "--draft", "ngram", "--acceptance", "synthetic:0.8"))
    assert_one_line_error(result, "--acceptance synthetic:0.8", "K=3", "--draft ngram may propose fewer")
    assert not (tmp_path / "run").exists()
    ar_only = runner.invoke(app, run_args(tiny, tmp_path / "ar", "--draft", "ngram", "--methods", "ar",
                                          "--acceptance", "synthetic:0.8"))
    assert ar_only.exit_code == 0, ar_only.output  # nothing drafts: nothing to refuse
