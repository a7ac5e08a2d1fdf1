"""Known-answer tests for the run summaries added beside the main table: MBU, SSD overview, Pareto."""

from __future__ import annotations

import math

import pandas as pd

from ssdbench.report.bandwidth_use import target_mbu
from ssdbench.report.pareto import mark_pareto, throughput_latency
from ssdbench.report.ssd_summary import chain_against_verify, chain_lines, ssd_overview


def _requests(method: str, engine: str, rounds: list[int], decode_ms: list[float], new_tokens: list[int],
              batch_size: int = 1) -> pd.DataFrame:
    n = len(rounds)
    return pd.DataFrame({"method": [method] * n, "engine": [engine] * n, "rounds": rounds, "decode_ms": decode_ms,
                         "new_tokens": new_tokens, "request_idx": list(range(n)), "repeat": [0] * n,
                         "batch_size": [batch_size] * n})


def test_target_mbu_is_bytes_times_forwards_per_second_over_bandwidth():
    requests = pd.concat([_requests("ar", "native", [10, 20], [2000.0, 2000.0], [11, 21]),
                          _requests("hf-generate", "transformers", [0], [1000.0], [6]),
                          _requests("hf-assisted", "transformers", [0], [1000.0], [6])])
    mbu = target_mbu(requests, weight_bytes=1e9, bandwidth_gbs=10.0)
    assert math.isclose(mbu["ar"], 0.75)  # median of 5 and 10 forwards/s x 1 GB / 10 GB/s
    assert math.isclose(mbu["hf-generate"], 0.5)  # one forward per token after the first
    assert math.isnan(mbu["hf-assisted"])
    assert target_mbu(requests, weight_bytes=None, bandwidth_gbs=10.0) == {}


def test_ssd_overview_counts_hits_waits_and_overlap():
    steps = pd.DataFrame({
        "method": ["ssd"] * 4, "engine": ["native"] * 4, "repeat": [0] * 4, "t_start_ns": [1, 1, 2, 3],
        "cache_hit": [True, False, True, True], "emitted": [3, 1, 4, 2], "backup": [None, "jit", None, None],
        "fan_out_total": [4, 4, 6, 6], "wait_ms": [10.0, 10.0, 0.0, 30.0], "draft_ms": [40.0, 40.0, 20.0, 40.0],
        "step_ms": [100.0, 100.0, 50.0, 150.0],
    })
    row = ssd_overview(steps).iloc[0]
    assert row["cache_hit_rate"] == 0.75
    assert row["acceptance_length_hit"] == 3.0 and row["acceptance_length_miss"] == 1.0
    assert math.isclose(row["wait_share"], 40 / 300)  # rounds counted once, not once per row
    assert math.isclose(row["overlap_share"], (100 - 40) / 100)
    assert row["backups"] == "jit 1"


def _ssd_rounds(verify_ms: list[float], fan_out: list[int]) -> pd.DataFrame:
    n = len(verify_ms)
    return pd.DataFrame({"method": ["ssd"] * n, "engine": ["native"] * n, "repeat": [0] * n, "t_start_ns": range(n),
                         "verify_ms": verify_ms, "fan_out_total": fan_out})


def _draft_events(glue_ms: float, tree_ms: list[float]) -> pd.DataFrame:
    kinds, spans, t = [], [], 0
    for kind, ms in [("glue", glue_ms), *(("tree", ms) for ms in tree_ms), ("answer", 1.0)]:
        kinds.append(kind)
        spans.append((t, t + int(ms * 1e6)))
        t += int(ms * 1e6) + 1000
    return pd.DataFrame({"method": "ssd", "role": "draft", "kind": kinds, "t_start_ns": [a for a, _ in spans],
                         "t_end_ns": [b for _, b in spans]})


def test_a_chain_longer_than_the_verify_is_said_in_one_line_with_both_times():
    events = _draft_events(10.0, [15.0] * 4)  # glue 10 + 4 steps of 15 = 70 ms
    slow = chain_against_verify(_ssd_rounds([50.0] * 3, [3] * 3), events, k=4)
    assert math.isclose(slow["chain_ms"], 70.0) and not slow["fits"]
    (line,) = chain_lines(slow)
    assert "70.0 ms" in line and "50.0 ms" in line and "does not finish within a verify" in line
    fast = chain_against_verify(_ssd_rounds([80.0] * 3, [3] * 3), events, k=4)
    assert fast["fits"] and chain_lines(fast) == []
    assert chain_against_verify(_ssd_rounds([80.0], [3]), events.iloc[:0], k=4) is None  # no timeline: no verdict


def test_the_verify_slowdown_beside_a_tree_is_measured_against_rounds_without_one():
    rounds = _ssd_rounds([60.0] * 5 + [40.0] * 5, [3] * 5 + [0] * 5)
    check = chain_against_verify(rounds, _draft_events(5.0, [5.0] * 4), k=4)
    assert math.isclose(check["verify_slowdown"], 1.5)
    assert any("1.50x" in line and "60.0 ms" in line and "40.0 ms" in line for line in chain_lines(check))
    few = chain_against_verify(rounds.iloc[:7], _draft_events(5.0, [5.0] * 4), k=4)  # 2 sync rounds: no comparison
    assert "verify_slowdown" not in few


def test_pareto_frontier_per_method():
    points = pd.DataFrame({"method": ["ar", "ar", "ar", "sd"], "label": ["ar"] * 3 + ["sd"],
                           "throughput_tokens_per_s": [10.0, 20.0, 15.0, 5.0], "latency_ms_p50": [100.0, 200.0, 300.0, 900.0]})
    frontier = mark_pareto(points)
    assert frontier["on_frontier"].tolist() == [True, True, False, True]


def test_throughput_counts_a_batch_once_at_its_longest_row():
    requests = _requests("ar", "native", [5, 5, 5, 5], [1000.0, 2000.0, 1000.0, 1000.0], [11, 11, 11, 11], batch_size=2)
    row = throughput_latency(requests).iloc[0]
    assert math.isclose(row["throughput_tokens_per_s"], 40 / 3.0)  # 40 tokens over batches of 2 s and 1 s
    assert row["latency_ms_p50"] == 1000.0


def test_end_to_end_speedup_is_spec_bench_ratio_of_mean_speeds_with_ttft_included():
    from ssdbench.metrics.summary import end_to_end_speedup

    def frame(ttft_ms, decode_ms, new_tokens):
        return pd.DataFrame({"suite": "s", "prompt_id": ["a", "b", "c"][: len(ttft_ms)], "repeat": 0,
                             "ttft_ms": ttft_ms, "decode_ms": decode_ms, "new_tokens": new_tokens})

    base = frame([500.0, 1000.0], [1500.0, 3000.0], [21, 41])  # 10.5 and 10.25 tok/s whole-request
    fast = frame([1000.0, 1000.0, 100.0], [500.0, 1000.0, None], [21, 41, 1])  # 14 and 20.5; "c" is unpaired
    row = end_to_end_speedup(fast, base)
    assert math.isclose(row["speedup_e2e"], ((14 + 20.5) / 2) / ((10.5 + 10.25) / 2))
    assert math.isclose(row["e2e_tokens_per_s_mean"], (14 + 20.5 + 10) / 3)
    assert math.isnan(end_to_end_speedup(fast, base.iloc[:0])["speedup_e2e"])


def test_throughput_never_groups_requests_decoded_one_at_a_time():
    """hf baselines in a --batch-size 2 run ran one request at a time: four batches, not two."""
    requests = _requests("hf-generate", "transformers", [0] * 4, [1000.0, 2000.0, 1000.0, 1000.0], [11] * 4)
    row = throughput_latency(requests).iloc[0]
    assert math.isclose(row["throughput_tokens_per_s"], 40 / 5.0)


def test_throughput_keeps_a_short_last_batch_whole():
    """7 requests in batches of 4: the last batch holds 3 (requests 4, 5, 6), timed once at its longest."""
    requests = _requests("ar", "native", [5] * 7, [1000.0] * 4 + [3000.0, 1000.0, 1000.0], [11] * 7, batch_size=4)
    requests.loc[4:, "batch_size"] = 3
    row = throughput_latency(requests).iloc[0]
    assert math.isclose(row["throughput_tokens_per_s"], 70 / 4.0)  # batches of 1 s and 3 s
