"""`ssdbench export --format specbench`: Spec-Bench's own formulas, applied to the exported files,
give back ssdbench's end-to-end speedup and acceptance from the same run.

The formulas (Spec-Bench's evaluation/speed.py, reimplemented here): per question,
speed = Σ new_tokens / Σ wall_time over its turns; speedup = mean(speeds) / mean(baseline
speeds); mean accepted tokens = mean of every accept_lengths entry (prefill's included).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from cli_fixtures import save_tiny_model
from typer.testing import CliRunner

from ssdbench.cli.main import app

runner = CliRunner()
QUESTIONS = [  # Spec-Bench's question.jsonl layout, in its spec_bench/ data folder
    {"question_id": 81, "category": "writing", "turns": ["w3 w4 w5 w3 w4", "w6"]},
    {"question_id": 161, "category": "translation", "turns": ["w7 w8 w7 w8 w9"]},
    {"question_id": 241, "category": "summarization", "turns": ["w10 w11 w12 w10 w11 w12"]},
]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("specbench")
    target = save_tiny_model(root / "tiny", vocab=64, seed=0)
    (root / "data" / "spec_bench").mkdir(parents=True)
    (root / "data" / "spec_bench" / "question.jsonl").write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS))
    out = root / "run"
    result = runner.invoke(app, ["run", "--target", str(target), "--suite", "specbench", "--data-dir", str(root / "data"),
                                 "--methods", "ar,sd,ssd", "--k", "3", "--fan-out", "2", "--max-new-tokens", "12",
                                 "--no-chat-template", "--num-prompts", "0", "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out


def read_answers(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def specbench_speedup(answers: list[dict], baseline: list[dict]) -> float:
    def speeds(rows):
        return [sum(r["choices"][0]["new_tokens"]) / sum(r["choices"][0]["wall_time"]) for r in rows]

    return float(np.mean(speeds(answers)) / np.mean(speeds(baseline)))


def specbench_mean_accepted(answers: list[dict]) -> float:
    return float(np.mean([a for r in answers for a in r["choices"][0]["accept_lengths"]]))


def test_exported_answers_reproduce_speedup_and_acceptance(run_dir, tmp_path):
    result = runner.invoke(app, ["export", str(run_dir), "--format", "specbench", "--out", str(tmp_path / "answers")])
    assert result.exit_code == 0, result.output
    compared = runner.invoke(app, ["compare", str(run_dir), "--format", "json"])
    assert compared.exit_code == 0, compared.output
    rows = {row["variant"]: row for row in json.loads(compared.output)["rows"]}
    ar = read_answers(tmp_path / "answers" / "ar.jsonl")
    for variant in ("ar", "sd", "ssd"):
        answers = read_answers(tmp_path / "answers" / f"{variant}.jsonl")
        assert [(a["question_id"], a["category"]) for a in answers] == [(q["question_id"], q["category"]) for q in QUESTIONS]
        for a in answers:
            choice = a["choices"][0]
            assert sum(choice["accept_lengths"]) == choice["new_tokens"][0] and choice["accept_lengths"][0] == 1
        assert specbench_speedup(answers, ar) == pytest.approx(rows[variant]["speedup_e2e"], rel=1e-9)
        # Spec-Bench counts the prefill's token as one forward; ssdbench's acceptance length counts rounds only
        entries = [a for r in answers for a in r["choices"][0]["accept_lengths"]]
        prefills = len(answers)
        mean_accepted = specbench_mean_accepted(answers)
        assert (mean_accepted * len(entries) - prefills) / (len(entries) - prefills) == pytest.approx(
            rows[variant]["acceptance_length"], rel=1e-9)
    assert rows["sd"]["acceptance_length"] > 1  # the comparison is not trivially all ones


def test_export_refuses_an_unknown_format(run_dir, tmp_path):
    result = runner.invoke(app, ["export", str(run_dir), "--format", "mtbench", "--out", str(tmp_path)])
    assert result.exit_code != 0 and "specbench" in result.output
