"""`ssdbench reproduce`: each study an ordinary sweep folder, its verdicts computed from the recorded rounds,
and verdicts that can come out either way."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from cli_checks import assert_one_line_error
from cli_fixtures import save_tiny_model
from ssdbench.cli.main import app
from ssdbench.reproduce import backups, fan_out
from ssdbench.reproduce.findings import FAILS, HOLDS, INCONCLUSIVE, judge_above
from ssdbench.reproduce.study import StudyData

runner = CliRunner()


def fan_out_rounds(miss_of, *, prompts: int = 12, rounds: int = 40, temperature: float = 1.0, seed: int = 0):
    """ssd rounds of `prompts` requests at F = 1, 2, 4, 8, each round a miss with probability miss_of(F)."""
    rng = np.random.default_rng(seed)
    rows = []
    for f in (1, 2, 4, 8):
        for p in range(prompts):
            misses = rng.random(rounds) < miss_of(f)
            rows += [{"suite": "s", "prompt_id": str(p), "repeat": 0, "method": "ssd", "cache_hit": not m,
                      "p_fan_out": str(f), "p_temperature": temperature} for m in misses]
    return pd.DataFrame(rows)


def test_the_fan_out_fit_recovers_a_power_law_and_says_it_holds():
    rows = fan_out_rounds(lambda f: 0.6 * f ** -0.7)
    r, r2 = fan_out.fit(rows)
    assert abs(r - 0.7) < 0.1 and r2 > 0.9
    finding = fan_out.judge_temperature(rows, 1.0)
    assert finding.verdict == HOLDS and finding.low > 0, finding


def test_a_miss_rate_that_does_not_fall_with_the_fan_out_is_never_said_to_hold():
    for seed in range(10):
        flat = fan_out.judge_temperature(fan_out_rounds(lambda f: 0.5, seed=seed), 1.0)
        assert flat.verdict != HOLDS, flat
    rising = fan_out.judge_temperature(fan_out_rounds(lambda f: min(0.1 * f, 0.9)), 1.0)
    assert rising.verdict == FAILS, rising


def test_a_draft_chain_that_outlasts_a_verify_makes_a_rising_miss_rate_inconclusive_not_false():
    """Where the draft cannot finish its chain within a verify, wider trees arrive late: the study says so
    instead of 'does not hold'; a fall that holds keeps its verdict with the caveat beside it."""
    late = {"fits": False, "glue_ms": 12.0, "k": 4, "tree_step_ms": 20.0, "verify_ms": 38.0}
    rows = fan_out_rounds(lambda f: min(0.1 * f, 0.9))
    assert fan_out.judge_temperature(rows, 1.0, chain={**late, "fits": True}).verdict == FAILS
    rising = fan_out.judge_temperature(rows, 1.0, chain=late)
    assert rising.verdict == INCONCLUSIVE and "outlasts a verify (38.0 ms)" in rising.reason
    falling = fan_out.judge_temperature(fan_out_rounds(lambda f: 0.6 * f ** -0.7), 1.0, chain=late)
    assert falling.verdict == HOLDS and "outlasts" in falling.reason


def test_a_hit_rate_saturated_at_f1_is_inconclusive_with_the_reason():
    finding = fan_out.judge_temperature(fan_out_rounds(lambda f: 0.0), 0.0)
    assert finding.verdict == INCONCLUSIVE and "degenerate" in finding.reason and "100.0%" in finding.reason


def test_judge_above_gives_all_three_verdicts():
    assert judge_above(1.1, 1.3, 1.0, above="a", below="b") == (HOLDS, "a")
    assert judge_above(0.7, 0.9, 1.0, above="a", below="b") == (FAILS, "b")
    assert judge_above(0.9, 1.1, 1.0, above="a", below="b")[0] == INCONCLUSIVE
    assert judge_above(math.nan, math.nan, 1.0, above="a", below="b")[0] == INCONCLUSIVE


def test_reversing_the_backups_costs_moves_the_crossover():
    ratios = {1: (0.7, 0.6, 0.8), 2: (0.85, 0.8, 0.9), 4: (1.0, 0.9, 1.1), 8: (1.3, 1.2, 1.4)}  # fast / jit
    assert backups.crossover(ratios)[:2] == (8, HOLDS)
    cheaper_fast = {b: (e * 1.2, lo * 1.2, hi * 1.2) for b, (e, lo, hi) in ratios.items()}
    assert backups.crossover(cheaper_fast)[:2] == (4, HOLDS)  # fast cheaper: it wins from a smaller batch
    reversed_costs = {b: backups.inverse(r) for b, r in ratios.items()}  # jit's cost is fast's and back
    assert backups.crossover(reversed_costs)[1] == FAILS


def test_the_backups_study_reads_recorded_requests_paired_by_prompt():
    rows = []
    for batch, speed in ((1, {"jit": 10.0, "fast": 8.0}), (2, {"jit": 10.0, "fast": 13.0})):
        for backup, tok_s in speed.items():
            rows += [{"suite": "s", "prompt_id": str(p), "repeat": 0, "method": "ssd", "p_backup": backup,
                      "p_batch_size": batch, "decode_tokens_per_s": tok_s * (1 + 0.01 * p)} for p in range(6)]
    steps = pd.DataFrame(columns=["method", "cache_hit", "p_backup", "step_ms", "emitted"])
    findings = backups.judge(StudyData(steps, pd.DataFrame(rows), base=None))
    small, large, cross = findings
    assert small.verdict == HOLDS and abs(small.estimate - 1.25) < 1e-9
    assert large.verdict == HOLDS and abs(large.estimate - 1.3) < 1e-9
    assert cross.verdict == HOLDS and cross.estimate == 2


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """A tiny target and an unrelated tiny draft (another seed) sharing its vocabulary: natural cache hits
    are rare (about F in 512), so a synthetic hit rate H is what ssd's cache hits read, whatever F."""
    root = tmp_path_factory.mktemp("reproduce-pair")
    return (save_tiny_model(root / "target", vocab=512, seed=0), save_tiny_model(root / "draft", vocab=512, seed=1))


def reproduce(pair, out, *extra: str):
    target, draft = pair
    return runner.invoke(app, ["reproduce", "--target", str(target), "--draft", str(draft), "--suite", "smoke",
                               "--num-prompts", "4", "--max-new-tokens", "16", "--no-chat-template", "--k", "3",
                               "--out", str(out), *extra])


def test_fan_out_study_with_a_hit_rate_independent_of_f_does_not_say_holds(pair, tmp_path):
    out = tmp_path / "rp"
    result = reproduce(pair, out, "fan-out", "--quick", "--acceptance", "synthetic:0.7,hit=0.5", "--format", "json")
    assert result.exit_code == 0, result.output
    findings = pd.read_parquet(out / "findings.parquet")
    assert list(findings["study"]) == ["fan-out", "fan-out"]  # temperature 0 and 1
    assert HOLDS not in set(findings["verdict"]), findings[["verdict", "reason"]].to_string()
    for raw in findings["settings"]:
        hits = json.loads(raw)["hit_rates"]
        assert all(0.2 < h < 0.8 for h in hits), hits  # about H = 0.5 at every F
    index = json.loads((out / "fan-out" / "index.json").read_text())  # an ordinary sweep folder
    assert {p["status"] for p in index["points"]} == {"complete"} and len(index["points"]) == 6
    again = reproduce(pair, out, "fan-out", "--quick", "--acceptance", "synthetic:0.7,hit=0.5", "--format", "json")
    assert again.exit_code == 0, again.output  # resumed: every point complete, the same findings
    assert pd.read_parquet(out / "findings.parquet").equals(findings)
    report = runner.invoke(app, ["report", str(out)])
    assert report.exit_code == 0, report.output
    page = (out / "report" / "report.html").read_text()
    assert "<h2>Findings</h2>" in page and page.count("<tr>") == 1 + len(findings)
    assert (out / "report" / "study_fan-out.png").stat().st_size > 0


def test_ssd_vs_sd_study_pairs_the_methods_of_one_run(pair, tmp_path):
    out = tmp_path / "rp"
    result = reproduce(pair, out, "ssd-vs-sd", "--format", "markdown")
    assert result.exit_code == 0, result.output
    assert "| ssd-vs-sd |" in result.output
    [finding] = pd.read_parquet(out / "findings.parquet").to_dict("records")
    requests = pd.read_parquet(out / "ssd-vs-sd" / "b1-t0-k3" / "requests.parquet")
    speed = requests.groupby(["method", "prompt_id"])["decode_tokens_per_s"].mean()
    expected = float(np.exp(np.mean(np.log(speed["ssd"] / speed["sd"]))))
    assert finding["estimate"] == pytest.approx(expected)
    assert finding["verdict"] in (HOLDS, FAILS, INCONCLUSIVE)


def test_sharded_studies_merge_and_the_last_step_judges_them(pair, tmp_path):
    """A job array: each shard runs its slice of every study with enough points; merge; the last step runs
    what was left (a one-point study) and judges from the merged records."""
    for i in (1, 2):
        result = reproduce(pair, tmp_path / f"rp-{i}", "pareto", "ssd-vs-sd", "--quick", "--shard", f"{i}/2")
        assert result.exit_code == 0, result.output
        assert "ssd-vs-sd: 1 point(s), fewer than the 2 shards" in " ".join(result.output.split())
    assert sorted(p.name for p in (tmp_path / "rp-1").iterdir()) == ["pareto"]
    merged = tmp_path / "rp"
    merge = runner.invoke(app, ["merge", str(tmp_path / "rp-1" / "pareto"), str(tmp_path / "rp-2" / "pareto"),
                                "--out", str(merged / "pareto")])
    assert merge.exit_code == 0, merge.output
    last = reproduce(pair, merged, "pareto", "ssd-vs-sd", "--quick", "--format", "json")
    assert last.exit_code == 0, last.output
    assert "all complete" in " ".join(last.output.split())  # pareto: nothing rerun
    findings = pd.read_parquet(merged / "findings.parquet")
    assert list(findings["study"]) == ["pareto", "ssd-vs-sd"]
    assert len(json.loads(findings["settings"][0])["points"]) == 6  # ar, sd, ssd at batch 1 and 2


def test_an_unknown_study_is_one_line_naming_the_closest(pair, tmp_path):
    assert_one_line_error(reproduce(pair, tmp_path / "rp", "fanout"), "unknown study 'fanout'", "fan-out")
    assert not (tmp_path / "rp").exists()


def test_list_names_every_study_with_the_papers_claim():
    result = runner.invoke(app, ["reproduce", "--list"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    for name in ("datasets", "fan-out", "geometric", "saguaro", "backups", "pareto", "ssd-vs-sd"):
        assert f"│ {name}" in result.output
