"""A serving engine's per-step acceptance counts become rounds in steps.parquet, through the real path:
streamed events of vLLM's documented `--per-request-spec-decode-metrics detailed` shape, sent by a small
HTTP server on 127.0.0.1, parsed by the real client into a Completion, recorded as a run records an
endpoint request, written by the RunWriter and read back by `compare`. vLLM cannot run here."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from canned_server import CannedStream, serving
from ssdbench.decoding.recorder import Recorder, RequestKey
from ssdbench.endpoints.consistency import request_acceptance
from ssdbench.endpoints.engines.vllm import SOURCE as VLLM
from ssdbench.endpoints.records import record_success
from ssdbench.endpoints.wire.request import Sampling, stream_completion
from ssdbench.records.reader import load_run
from ssdbench.records.writer import RunWriter
from ssdbench.report.compare import compare_runs

SAMPLING = Sampling(max_new_tokens=9, temperature=0.0, top_p=1.0, seed=0)
# per prompt: accepted and drafted per verify step, as vLLM's detailed metrics give them
PER_STEP = {"p0": ([0, 1, 2, 2], [3, 3, 3, 3]), "p1": ([3, 3, 1], [3, 3, 2])}


def sse(events: list[dict]) -> bytes:
    return "".join(f"data: {json.dumps(event)}\n\n" for event in events).encode() + b"data: [DONE]\n\n"


def vllm_stream(accepted: list[int], drafted: list[int] | None) -> bytes:
    """A vLLM completions stream: token chunks, then the final usage chunk carrying the metrics (without
    `per_step_drafted` when `drafted` is None)."""
    tokens = 1 + sum(a + 1 for a in accepted)
    chunks = [{"model": "m", "choices": [{"index": 0, "text": f"t{i} ", "token_ids": [100 + i],
                                          "finish_reason": "length" if i == tokens - 1 else None}]}
              for i in range(tokens)]
    spec = {"num_spec_steps": len(accepted), "num_accepted_draft_tokens": sum(accepted),
            "mean_acceptance_length": 1 + sum(accepted) / len(accepted), "per_step_accepted": accepted}
    if drafted is not None:
        spec.update(num_draft_tokens=sum(drafted), draft_acceptance_rate=sum(accepted) / sum(drafted),
                    per_step_drafted=drafted)
    final = {"model": "m", "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": tokens},
             "metrics": {"speculative_decoding": spec}}
    return sse([*chunks, final])


def plain_stream() -> bytes:
    """A server that speculates without per-step counts (no metrics at all): requests, no rounds."""
    return sse([{"model": "m", "choices": [{"index": 0, "text": "a", "token_ids": [5]}]},
                {"model": "m", "choices": [{"index": 0, "text": "b", "token_ids": [6], "finish_reason": "length"}]},
                {"model": "m", "choices": [], "usage": {"completion_tokens": 2}}])


class Canned(CannedStream):
    pass


@pytest.fixture
def url():
    with serving(Canned) as served:
        yield served


def record(recorder: Recorder, url: str, name: str, prompt: str, idx: int, body: bytes) -> None:
    Canned.body = body
    completion = stream_completion(url, "m", [1, 2, 3], SAMPLING, timeout_s=10, read_acceptance=request_acceptance)
    key = RequestKey(name, "endpoint-c1", "smoke", prompt, idx, 0)
    record_success(recorder, key, completion, prompt_ids=[1, 2, 3], seed=0, temperature=0.0, concurrency=1,
                   url=url, t_start_ns=1, tokenize=lambda text: pytest.fail("the server sent ids"))


def recorded_run(tmp_path, url, *, drafted_given: bool = True):
    recorder = Recorder("endpoint-rounds")
    for idx, (prompt, (accepted, drafted)) in enumerate(PER_STEP.items()):
        record(recorder, url, "vllm", prompt, idx, vllm_stream(accepted, drafted if drafted_given else None))
        record(recorder, url, "plain", prompt, idx, plain_stream())
    writer = RunWriter.create(tmp_path / "run", recorder.run_id, {"config": {"temperature": 0.0}})
    writer.finish(recorder.steps, recorder.requests, [], optional={"endpoints": recorder.endpoints})
    return load_run(writer.path)


def test_per_step_counts_become_server_rounds_without_made_up_times(tmp_path, url):
    run = recorded_run(tmp_path, url)
    steps = run.steps
    assert set(steps["method"]) == {"vllm"}  # the request without per-step counts has no rounds
    for prompt, (accepted, drafted) in PER_STEP.items():
        mine = steps[steps["prompt_id"] == prompt].sort_values("round")
        assert mine["round"].tolist() == list(range(1, len(accepted) + 1))
        assert mine["accepted"].tolist() == accepted and mine["proposed"].tolist() == drafted
        assert mine["emitted"].tolist() == [a + 1 for a in accepted]
    assert (steps["counted_by"] == f"server: {VLLM}").all() and (steps["acceptance"] == "exact").all()
    for unknown in ("t_start_ns", "step_ms", "verify_ms", "draft_ms", "wait_ms", "sample_ms", "batch_size", "row",
                    "bonus_token"):
        assert steps[unknown].isna().all(), unknown
    requests = run.requests.set_index(["method", "prompt_id"])
    assert requests.loc[("vllm", "p0"), "rounds"] == 4 and requests.loc[("plain", "p0"), "rounds"] == 0


def test_compare_reads_acceptance_from_server_rounds_and_leaves_it_unknown_without_them(tmp_path, url):
    run = recorded_run(tmp_path, url)
    rows = compare_runs([run], baseline="plain@endpoint-c1").rows.set_index("variant")
    vllm = rows.loc["vllm@endpoint-c1"]
    pooled = [a for accepted, _ in PER_STEP.values() for a in accepted]
    assert vllm["acceptance_length"] == pytest.approx(1 + sum(pooled) / len(pooled))
    means = run.endpoints[run.endpoints["method"] == "vllm"]["acceptance_length"]  # what the server reported
    assert vllm["acceptance_length_per_request"] == pytest.approx(means.mean())
    drafted = sum(sum(d) for _, d in PER_STEP.values())
    assert vllm["draft_acceptance_rate"] == pytest.approx(sum(pooled) / drafted)
    assert vllm["rounds"] == len(pooled) and vllm["acceptance"] == "exact"
    assert vllm["accept_marginal"][0] == pytest.approx(6 / 7)  # 6 of 7 rounds accepted their first draft
    plain = rows.loc["plain@endpoint-c1"]
    assert plain["rounds"] == 0 and pd.isna(plain["acceptance_length"])
    assert vllm["speedup_pairs"] == 2


def test_rounds_without_a_per_step_draft_count_leave_proposed_and_the_rate_unknown(tmp_path, url):
    run = recorded_run(tmp_path, url, drafted_given=False)
    assert len(run.steps) == 7 and run.steps["proposed"].isna().all()
    vllm = compare_runs([run], baseline="plain@endpoint-c1").rows.set_index("variant").loc["vllm@endpoint-c1"]
    assert vllm["acceptance_length"] == pytest.approx(1 + 12 / 7)
    assert pd.isna(vllm["draft_acceptance_rate"]) and vllm["accept_marginal"] == []


def test_the_run_summary_reads_server_rounds_straight_from_the_recorder(url):
    """`ssdbench run` prints its table from the recorder's columns, before any Parquet round trip."""
    from ssdbench.metrics.summary import summarize

    recorder = Recorder("in-memory")
    for idx, (prompt, (accepted, drafted)) in enumerate(PER_STEP.items()):
        record(recorder, url, "vllm", prompt, idx, vllm_stream(accepted, drafted))
        record(recorder, url, "plain", prompt, idx, plain_stream())
    rows = summarize(pd.DataFrame(recorder.requests), pd.DataFrame(recorder.steps)).set_index("label")
    assert rows.loc["vllm@endpoint-c1", "acceptance_length"] == pytest.approx(1 + 12 / 7)
    assert rows.loc["vllm@endpoint-c1", "draft_acceptance_rate"] == pytest.approx(12 / 20)
    assert rows.loc["plain@endpoint-c1", "rounds"] == 0


def test_report_draws_the_server_rounds_acceptance_and_leaves_them_out_of_round_timings(tmp_path, url):
    from ssdbench.report.html import write_report
    from ssdbench.report.plots import frontier_points, stack_runs

    run = recorded_run(tmp_path, url)
    (tmp_path / "report").mkdir()
    _, plots = write_report([run], tmp_path / "report")
    drawn = {plot.name for plot in plots if plot.path is not None}
    assert {"acceptance_length", "per_position_acceptance"} <= drawn
    points = frontier_points(stack_runs([run]))  # from the requests, one per endpoint variant; no round times
    assert sorted(points["label"]) == ["plain@endpoint-c1", "vllm@endpoint-c1"] and points["batch_size"].isna().all()


def written_as(path, version: int, dropped: list[str]) -> None:
    """The run at `path` rewritten as schema `version` wrote it: the endpoints columns it lacked dropped, the
    version in every table and the manifest, the files' hashes renewed."""
    import json

    import pyarrow.parquet as pq

    from ssdbench.records import schema
    from ssdbench.records.manifest import sha256_file

    for name in (*schema.TABLE_NAMES, "endpoints"):
        table = pq.read_table(path / f"{name}.parquet")
        if name == "endpoints":
            table = table.drop_columns(dropped)
        meta = {**table.schema.metadata, schema.VERSION_KEY: str(version).encode()}
        pq.write_table(table.replace_schema_metadata(meta), path / f"{name}.parquet")
    manifest = json.loads((path / schema.MANIFEST_NAME).read_text())
    for name, entry in manifest["files"].items():
        entry.update(sha256=sha256_file(path / name), bytes=(path / name).stat().st_size)
    (path / schema.MANIFEST_NAME).write_text(json.dumps({**manifest, "schema_version": version}))


V6_COLUMNS = ["cached_prompt_tokens", "target_passes", "text_matches_ar"]


def test_a_v4_endpoint_run_still_loads_with_the_v5_columns_empty(tmp_path, url):
    """v5 added endpoints.acceptance_invalid and endpoints.model_asked: an earlier run reads with them null."""
    from ssdbench.records import schema

    path = recorded_run(tmp_path, url).path
    written_as(path, 4, ["acceptance_invalid", "model_asked", *V6_COLUMNS])
    run = load_run(path)
    assert run.manifest["schema_version"] == schema.SCHEMA_VERSION
    assert run.endpoints["acceptance_invalid"].isna().all() and run.endpoints["model_asked"].isna().all()
    assert len(run.endpoints) == 2 * len(PER_STEP)


def test_a_v5_endpoint_run_still_loads_with_the_v6_columns_null(tmp_path, url):
    """v6 added endpoints.cached_prompt_tokens, target_passes and text_matches_ar: a v5 run reads with them null
    (unknown), and its other figures as they were written."""
    from ssdbench.records import schema

    written = recorded_run(tmp_path, url)
    assert written.endpoints["target_passes"].notna().any()  # the current writer fills them, so null is the upgrader's
    written_as(written.path, 5, V6_COLUMNS)
    run = load_run(written.path)
    assert run.manifest["schema_version"] == schema.SCHEMA_VERSION == 6
    assert all(run.endpoints[name].isna().all() for name in V6_COLUMNS)
    assert run.endpoints["accepted_tokens"].tolist() == written.endpoints["accepted_tokens"].tolist()
