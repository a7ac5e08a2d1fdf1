"""CI gating on synthetic runs with planted answers: regressions beyond the noise fail, noise passes."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from ssdbench.cli.main import app
from ssdbench.errors import UsageError
from ssdbench.records.reader import load_run
from ssdbench.report.run_report import report_of_run
from ssdbench.report.gate import FAIL, INSUFFICIENT, NOT_APPLICABLE, PASS, evaluate, exit_code, parse_fail_on
from synthetic_runs import Variant, speeds, write_run

runner = CliRunner()
N = 10


def gate(*args: str):
    return runner.invoke(app, ["compare", *args])


def pair(tmp_path, *, factor: float, noise_pct: float = 0.5, num_prompts: int = N, sd_factor: float = 1.5,
         cand_sd_factor: float | None = None, cand_accepted=(3,), **cand_kwargs):
    """A baseline and a candidate run whose candidate is `factor` × the baseline on every prompt."""
    base = write_run(tmp_path / "base", [
        Variant("ar", speeds(num_prompts, noise_pct=noise_pct, seed=1)),
        Variant("sd", speeds(num_prompts, factor=sd_factor, noise_pct=noise_pct, seed=2), accepted=(3,)),
    ], num_prompts=num_prompts)
    cand_sd = sd_factor * factor if cand_sd_factor is None else cand_sd_factor
    cand = write_run(tmp_path / "cand", [
        Variant("ar", speeds(num_prompts, factor=factor, noise_pct=noise_pct, seed=3)),
        Variant("sd", speeds(num_prompts, factor=cand_sd, noise_pct=noise_pct, seed=4), accepted=cand_accepted,
                **cand_kwargs),
    ], num_prompts=num_prompts, **{k: v for k, v in cand_kwargs.items() if k == "temperature"})
    return base, cand


def interval(detail: str) -> tuple[float, float]:
    """(low, high) of a verdict's "×0.800 [95% CI 0.790–0.810] ..." text."""
    low, high = detail.split("CI ")[1].split("]")[0].split("–")
    return float(low), float(high)


def verdicts(base, cand, text: str, **kwargs):
    return evaluate(report_of_run(load_run(base)), report_of_run(load_run(cand)), parse_fail_on(text), **kwargs)


def test_planted_slowdown_fails_and_its_interval_holds_the_planted_ratio(tmp_path):
    base, cand = pair(tmp_path, factor=0.8)
    found = verdicts(base, cand, "decode_tokens_per_s:-5%")
    assert [v.status for v in found] == [FAIL, FAIL] and exit_code(found) == 1
    for v in found:
        low, high = interval(v.detail)
        assert low <= 0.8 <= high < 0.95, v.detail
    result = gate("--baseline", str(base), str(cand), "--fail-on", "decode_tokens_per_s:-5%")
    assert result.exit_code == 1, result.output
    assert "GATE FAILED" in result.output and "FAIL decode_tokens_per_s:-5%" in result.output


@pytest.mark.parametrize("factor", [0.99, 1.0, 1.01])
def test_noise_level_changes_pass(tmp_path, factor):
    base, cand = pair(tmp_path, factor=factor, noise_pct=1.0)
    result = gate("--baseline", str(base), str(cand), "--fail-on",
                  "decode_tokens_per_s:-5%,speedup:-3%,tpot_ms:+5%,acceptance_length:exact,outputs_match:false")
    assert result.exit_code == 0, result.output
    assert "gate passed: all" in result.output and "FAIL" not in result.output


def test_estimate_beyond_the_limit_but_within_noise_passes(tmp_path):
    base, cand = pair(tmp_path, factor=0.94, noise_pct=8.0, num_prompts=6)
    found = verdicts(base, cand, "decode_tokens_per_s:-5%")
    assert all(v.status != FAIL for v in found), [v.detail for v in found]


def test_speedup_regression_is_paired_within_each_run(tmp_path):
    """Baseline sd is 1.5× its ar; candidate sd is 1.2× its ar (ar unchanged): speedup ratio 0.8."""
    base, cand = pair(tmp_path, factor=1.0, cand_sd_factor=1.2)
    found = verdicts(base, cand, "speedup:-3%")
    assert [(v.variant, v.status) for v in found] == [("sd", FAIL)]
    low, high = interval(found[0].detail)
    assert low <= 0.8 <= high, found[0].detail


def test_acceptance_length_is_compared_exactly_at_a_fixed_seed(tmp_path):
    # 16 decode tokens: 4 rounds of 4 (AL 4) → 5 rounds of 3 and one cut to 1 at the limit (AL 16/6)
    base, cand = pair(tmp_path, factor=1.0, cand_accepted=(2,))
    found = verdicts(base, cand, "acceptance_length:-2%")
    assert [(v.variant, v.status) for v in found] == [("sd", FAIL)]  # ar proposes nothing: not checked
    assert "4.0000 → 2.6667 (-33.33%)" in found[0].detail
    assert verdicts(base, cand, "acceptance_length:exact")[0].status == FAIL
    assert verdicts(base, cand, "acceptance_length:35%")[0].status == PASS


def test_acceptance_under_sampling_with_other_seeds_uses_the_bootstrap(tmp_path):
    base = write_run(tmp_path / "b", [Variant("sd", 100.0, accepted=(3, 1))], temperature=0.7, seed=0)
    cand = write_run(tmp_path / "c", [Variant("sd", 100.0, accepted=(3, 1))], temperature=0.7, seed=100)
    for text in ("acceptance_length:-2%", "acceptance_length:exact"):
        found = verdicts(base, cand, text)
        assert found[0].status == PASS and "95% CI" in found[0].detail, found[0].detail


def test_acceptance_drop_under_sampling_fails_when_the_whole_interval_is_beyond(tmp_path):
    base = write_run(tmp_path / "b", [Variant("sd", 100.0, accepted=(3, 2))], temperature=0.7, seed=0)
    cand = write_run(tmp_path / "c", [Variant("sd", 100.0, accepted=(1,))], temperature=0.7, seed=100)
    found = verdicts(base, cand, "acceptance_length:-2%")
    assert found[0].status == FAIL and "95% CI" in found[0].detail


def test_outputs_match_fails_on_changed_outputs_and_is_na_when_sampled(tmp_path):
    base, cand = pair(tmp_path, factor=1.0, output_offset=1)
    found = verdicts(base, cand, "outputs_match:false")
    assert [(v.variant, v.status) for v in found] == [("ar", PASS), ("sd", FAIL)]
    assert "0/10 identical to the baseline's sd; 0/10 identical to this run's ar" in found[1].detail
    sampled = write_run(tmp_path / "s", [Variant("ar"), Variant("sd", accepted=(3,))], temperature=0.7)
    found = verdicts(sampled, sampled, "outputs_match:false")
    assert {v.status for v in found} == {NOT_APPLICABLE} and exit_code(found) == 0


def test_too_few_pairs_is_insufficient_data_not_a_failure(tmp_path):
    base, cand = pair(tmp_path, factor=0.5, num_prompts=3)
    args = ["--baseline", str(base), str(cand), "--fail-on", "decode_tokens_per_s:-5%"]
    result = gate(*args)
    assert result.exit_code == 0, result.output
    assert "INSUFFICIENT DATA" in result.output and "insufficient data decode_tokens_per_s" in result.output
    assert gate(*args, "--strict").exit_code == 1
    assert {v.status for v in verdicts(base, cand, "decode_tokens_per_s:-5%")} == {INSUFFICIENT}


def test_a_variant_missing_from_the_candidate_is_flagged(tmp_path):
    base = write_run(tmp_path / "b", [Variant("ar"), Variant("sd", accepted=(3,))])
    cand = write_run(tmp_path / "c", [Variant("ar")])
    found = verdicts(base, cand, "decode_tokens_per_s:-5%")
    assert ("variants", "sd", INSUFFICIENT) in [(v.check, v.variant, v.status) for v in found]


@pytest.mark.parametrize("text,fragment", [
    ("decode_tokens_per_sec:-5%", "did you mean 'decode_tokens_per_s'"),
    ("acceptance_lenght:-2%", "did you mean 'acceptance_length'"),
    ("decode_tokens_per_s:-5", "malformed threshold '-5'"),
    ("decode_tokens_per_s:+5%", "write -5%"),
    ("ttft_ms:-5%", "write +5%"),
    ("outputs_match:true", "only 'false'"),
    ("speedup", "missing threshold"),
    ("speedup:exact", "'exact' is for deterministic metrics"),
    ("speedup:-3%,speedup:-5%", "gives speedup two rules, 'speedup:-3%' and 'speedup:-5%'; keep one"),
    ("acceptance_length:exact, acceptance_length:-2%", "gives acceptance_length two rules"),
    (",", "empty"),
])
def test_malformed_fail_on_is_a_usage_error(tmp_path, text, fragment):
    with pytest.raises(UsageError, match=fragment.replace("+", r"\+")):
        parse_fail_on(text)
    base = write_run(tmp_path / "b", [Variant("ar")])
    result = gate("--baseline", str(base), str(base), "--fail-on", text)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and fragment in lines[0]


def test_a_metric_given_twice_with_one_rule_is_checked_once():
    assert [c.text for c in parse_fail_on("speedup:-3%,outputs_match:false,speedup:-3.0%")] == [
        "speedup:-3%", "outputs_match:false"]


def test_fail_on_needs_a_baseline(tmp_path):
    run = write_run(tmp_path / "r", [Variant("ar")])
    result = gate(str(run), "--fail-on", "decode_tokens_per_s:-5%")
    assert result.exit_code == 2 and "--baseline" in result.output


def test_two_runs_without_baseline_gate_the_second_against_the_first(tmp_path):
    base, cand = pair(tmp_path, factor=0.8)
    result = gate(str(base), str(cand), "--fail-on", "decode_tokens_per_s:-5%", "--format", "json")
    assert result.exit_code == 1
    import json

    payload = json.loads(result.stdout)
    assert payload["gate"]["exit_code"] == 1 and {c["status"] for c in payload["gate"]["checks"]} == {FAIL}


def test_real_runs_gate_on_deterministic_metrics(tmp_path):
    """Two identical real runs of a tiny model pass the exact gate; a different K changes acceptance."""
    from cli_fixtures import save_tiny_model

    target = save_tiny_model(tmp_path / "tiny", vocab=64, seed=0)

    def run(out: str, *extra: str):
        args = ["run", "--target", str(target), "--suite", "smoke", "--num-prompts", "3", "--max-new-tokens", "12",
                "--no-chat-template", "--methods", "ar,sd", "--out", str(tmp_path / out), *extra]
        assert runner.invoke(app, args).exit_code == 0
        return str(tmp_path / out)

    base, again, other_k = run("base", "--k", "3"), run("again", "--k", "3"), run("k2", "--k", "2")
    fail_on = ["--fail-on", "outputs_match:false,acceptance_length:exact"]
    result = gate("--baseline", base, again, *fail_on)
    assert result.exit_code == 0 and "gate passed" in result.output, result.output
    result = gate("--baseline", base, other_k, *fail_on)
    assert result.exit_code == 1 and "FAIL acceptance_length:exact" in result.output, result.output
    assert "settings differ from run 0's: k 3 → 2" in result.output
