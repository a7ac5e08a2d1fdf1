"""`ssdbench serve` through ssdbench's own endpoint client: every method's greedy outputs are ar's, and the
acceptance the client reads back is what the server recorded. One `ssdbench run --methods ar` launches
the three servers (ar, sd, ssd) on the tiny model and runs the same prompts against each."""

from __future__ import annotations

import json
import shlex
import subprocess

import pandas as pd
import pytest

from serve_fixtures import CLI, free_port, serve_command

METHODS = ("ar", "sd", "ssd")
PROMPTS = ["--suite", "smoke", "--num-prompts", "3", "--max-new-tokens", "14", "--ignore-eos", "--threads", "1"]


@pytest.fixture(scope="module")
def served_run(tiny, tmp_path_factory):
    """The run's folder and each server's records folder, by method."""
    tmp = tmp_path_factory.mktemp("serve_exact")
    args, records = [], {}
    for method in METHODS:
        port = free_port()
        records[method] = tmp / f"srv_{method}"
        command = shlex.join(serve_command(tiny, method, port, records[method], "--max-new-tokens", "14"))
        args += ["--endpoint", f"srv_{method}=http://127.0.0.1:{port}", "--endpoint-launch", f"srv_{method}={command}"]
    out = tmp / "run"
    result = subprocess.run([*CLI, "run", "--methods", "ar", "--target", str(tiny), *PROMPTS, *args, "--out", str(out)],
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    return out, records


def _outputs(requests: pd.DataFrame, method: str) -> dict[str, list[int]]:
    rows = requests[requests.method == method]
    return {p: list(ids) for p, ids in zip(rows.prompt_id, rows.output_token_ids)}


def test_every_methods_server_answers_ars_greedy_tokens(served_run):
    out, _ = served_run
    requests = pd.read_parquet(out / "requests.parquet")
    ar = _outputs(requests, "ar")
    assert len(ar) == 3 and all(len(ids) == 14 for ids in ar.values())
    for method in METHODS:
        assert _outputs(requests, f"srv_{method}") == ar, method


def _server_accepted(records) -> dict[tuple[int, ...], int]:
    """Per prompt (its token ids): the drafts the server kept, from its own steps table."""
    requests = pd.read_parquet(records / "requests.parquet")
    steps = pd.read_parquet(records / "steps.parquet")
    steps = steps[steps.proposed > 0]
    kept = (steps.accepted.clip(upper=steps.emitted)).groupby(steps.prompt_id).sum()
    return {tuple(ids): int(kept.get(p, 0)) for p, ids in zip(requests.prompt_id, requests.prompt_token_ids)}


def test_the_clients_acceptance_is_the_servers_record(served_run):
    out, records = served_run
    endpoints = pd.read_parquet(out / "endpoints.parquet")
    requests = pd.read_parquet(out / "requests.parquet")
    prompts = {p: tuple(ids) for p, ids in zip(requests.prompt_id, requests.prompt_token_ids)}
    for method in ("sd", "ssd"):
        rows = endpoints[endpoints.method == f"srv_{method}"]
        server = _server_accepted(records[method])
        assert len(rows) == 3
        for prompt_id, accepted, drafted in zip(rows.prompt_id, rows.accepted_tokens, rows.draft_tokens):
            assert accepted == server[prompts[prompt_id]], (method, prompt_id)
            assert 0 < drafted
    ar_rows = endpoints[endpoints.method == "srv_ar"]
    assert ar_rows.accepted_tokens.isna().all()  # ar drafts nothing: no figures, not zeros


def test_the_client_knows_the_server_for_what_it_is(served_run):
    out, _ = served_run
    described = json.loads((out / "manifest.json").read_text())["endpoints"]["endpoints"]
    for method in METHODS:
        server = described[f"srv_{method}"]
        assert server["kind"] == "ssdbench" and server["server_version"].startswith("ssdbench ")
        assert server["server_dtype"] == "float32"
        assert "no fallback" not in server["acceptance_from_metrics"]  # its vLLM-named counters exist from the start


def test_a_servers_records_are_a_run_that_report_reads(served_run):
    _, records = served_run
    manifest = json.loads((records["ssd"] / "manifest.json").read_text())
    assert manifest["status"] == "complete"
    assert manifest["serve"]["batching"] == "static" and manifest["serve"]["method"] == "ssd"
    requests = pd.read_parquet(records["ssd"] / "requests.parquet")
    assert (requests.method == "ssd").all() and len(requests) == 4  # the client's unmeasured warm-up and 3 prompts
    result = subprocess.run([*CLI, "report", str(records["ssd"]), "--out", str(records["ssd"].parent / "report")],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    answers = records["ssd"].parent / "answers"
    result = subprocess.run([*CLI, "export", str(records["ssd"]), "--format", "specbench", "--out", str(answers)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    exported = [json.loads(line) for line in (answers / "ssd.jsonl").read_text().splitlines()]
    assert [e["question_id"] for e in exported] == list(requests.prompt_id)
