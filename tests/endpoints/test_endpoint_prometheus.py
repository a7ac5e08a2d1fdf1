"""The /metrics fallback on documented text shapes: llama-server's (`--metrics`, as its
server-task.cpp prints it) and vLLM's (prometheus_client: `_total`, `_created`, labels per engine),
and the rule that takes a before/after difference as one request's or refuses it."""

from __future__ import annotations

from ssdbench.endpoints.acceptance import Acceptance
from ssdbench.endpoints.counter_acceptance import counted, joined
from ssdbench.endpoints.engines.llama_cpp import COUNTERS as LLAMA_CPP_COUNTERS
from ssdbench.endpoints.engines.llama_cpp import SOURCE as LLAMA_CPP
from ssdbench.endpoints.engines.registry import counters_in
from ssdbench.endpoints.engines.vllm import COUNTERS as VLLM
from ssdbench.endpoints.wire.prometheus import parse_samples


def llama_text(predicted, drafted, accepted, steps, per_pos=()):
    lines = ["# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed, excluding cached tokens",
             "# TYPE llamacpp:prompt_tokens_total counter", "llamacpp:prompt_tokens_total 35",
             "# HELP llamacpp:tokens_predicted_total Number of generation tokens processed",
             "# TYPE llamacpp:tokens_predicted_total counter", f"llamacpp:tokens_predicted_total {predicted}",
             f"llamacpp:spec_decode_num_draft_tokens_total {drafted}",
             f"llamacpp:spec_decode_num_accepted_tokens_total {accepted}",
             f"llamacpp:spec_decode_num_drafts_total {steps}", "llamacpp:requests_processing 0"]
    if per_pos:
        lines += ["# TYPE llamacpp:spec_decode_num_accepted_tokens_per_pos_total counter"]
        lines += [f'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{{position="{i}"}} {n}'
                  for i, n in enumerate(per_pos)]
    return "\n".join(lines) + "\n"


VLLM_TEXT = """\
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="Qwen/Qwen3-8B"} 120.0
vllm:generation_tokens_total{engine="1",model_name="Qwen/Qwen3-8B"} 30.0
# HELP vllm:generation_tokens_created Number of generation tokens processed.
# TYPE vllm:generation_tokens_created gauge
vllm:generation_tokens_created{engine="0",model_name="Qwen/Qwen3-8B"} 1.7e+09
# TYPE vllm:spec_decode_num_drafts counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="Qwen/Qwen3-8B"} 40.0
vllm:spec_decode_num_drafts_total{engine="1",model_name="Qwen/Qwen3-8B"} 10.0
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="Qwen/Qwen3-8B"} 120.0
vllm:spec_decode_num_draft_tokens_total{engine="1",model_name="Qwen/Qwen3-8B"} 30.0
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="Qwen/Qwen3-8B"} 70.0
vllm:spec_decode_num_accepted_tokens_total{engine="1",model_name="Qwen/Qwen3-8B"} 20.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="Qwen/Qwen3-8B",position="0"} 35.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="Qwen/Qwen3-8B",position="1"} 25.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="Qwen/Qwen3-8B",position="2"} 10.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="Qwen/Qwen3-8B",position="0"} 12.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="Qwen/Qwen3-8B",position="2"} 8.0
vllm:spec_decode_num_accepted_tokens_per_pos_created{engine="0",model_name="Qwen/Qwen3-8B",position="0"} 1.7e+09
"""


def test_samples_keep_labels_and_skip_comments_and_unreadable_lines():
    samples = parse_samples('# HELP a:b x\n\nm{l="a,b \\"q\\"",k="v"} 2.5 1712345678000\nnot a sample\nn NaN\nz 7\n')
    assert [(s.name, s.labels) for s in samples] == [("m", {"l": 'a,b \\"q\\"', "k": "v"}), ("n", {}), ("z", {})]
    assert samples[0].value == 2.5 and samples[2].value == 7


def test_llama_cpp_counters_with_positions():
    reading = counters_in(llama_text(46, 12, 8, 3, per_pos=(3, 3, 2)))
    assert reading.names is LLAMA_CPP_COUNTERS
    assert (reading.generated, reading.draft_tokens, reading.accepted, reading.drafts) == (46, 12, 8, 3)
    assert reading.per_position == (3, 3, 2)
    assert counters_in(llama_text(0, 0, 0, 0)).per_position == ()  # no draft has run yet: no per-position lines


def test_vllm_counters_sum_label_sets_and_ignore_created():
    reading = counters_in(VLLM_TEXT)
    assert reading.names is VLLM
    assert (reading.generated, reading.draft_tokens, reading.accepted, reading.drafts) == (150, 150, 90, 50)
    assert reading.per_position == (47, 25, 18)


def test_vllm_names_without_total_suffix():
    text = "\n".join(f"vllm:{name} {value}" for name, value in (
        ("generation_tokens", 9), ("spec_decode_num_drafts", 3), ("spec_decode_num_draft_tokens", 9),
        ("spec_decode_num_accepted_tokens", 5)))
    reading = counters_in(text)
    assert (reading.generated, reading.drafts, reading.per_position) == (9, 3, ())


def test_no_speculation_counters_means_no_fallback():
    assert counters_in("# nothing\nllamacpp:tokens_predicted_total 10\nllamacpp:prompt_tokens_total 3\n") is None
    assert counters_in("") is None
    assert counters_in("<html>404 Not Found</html>") is None


def test_a_request_alone_gives_steps_length_and_positions():
    before = counters_in(llama_text(100, 40, 20, 10, per_pos=(8, 7, 5)))
    after = counters_in(llama_text(124, 64, 36, 16, per_pos=(14, 12, 7, 3)))
    reading, note = counted(before, after, completion_tokens=24)
    assert note is None and reading.source == "prometheus /metrics (llamacpp:spec_decode_*)"
    assert (reading.draft_tokens, reading.accepted_tokens, reading.verify_steps) == (24, 16, 6)
    assert reading.acceptance_length == (16 + 6) / 6
    assert reading.accepted_per_position == (6, 5, 2, 3)


def test_other_traffic_or_a_late_count_is_refused():
    before = counters_in(llama_text(100, 40, 20, 10))
    reading, note = counted(before, counters_in(llama_text(140, 80, 50, 20)), completion_tokens=24)
    assert reading is None and "other traffic" in note and "40 tokens" in note
    reading, note = counted(before, counters_in(llama_text(110, 50, 25, 12)), completion_tokens=24)
    assert reading is None and "10 of this request's 24" in note
    reading, note = counted(before, counters_in(llama_text(124, 50, 25, 12)), completion_tokens=None)
    assert reading is None and "no completion tokens" in note


def test_llama_cpp_counters_past_a_million_are_refused():
    before = counters_in(llama_text(999_990, 40, 20, 10))
    reading, note = counted(before, counters_in(llama_text("1.00001e+06", 50, 25, 12)), completion_tokens=20)
    assert reading is None and "rounds" in note


def test_no_speculation_in_the_request_is_no_reading_and_no_note():
    before = counters_in(llama_text(100, 40, 20, 10))
    assert counted(before, counters_in(llama_text(124, 40, 20, 10)), completion_tokens=24) == (None, None)


def test_a_rate_from_the_response_gains_the_counters_verify_steps():
    own = Acceptance(LLAMA_CPP, draft_tokens=24, accepted_tokens=16)
    from_counters = Acceptance("prometheus /metrics (llamacpp:spec_decode_*)", draft_tokens=24, accepted_tokens=16,
                               verify_steps=6, acceptance_length=22 / 6, accepted_per_position=(6, 5, 2, 3))
    reading, note = joined(own, from_counters, None)
    assert note is None and reading.source == "llama.cpp timings.draft_n + prometheus /metrics (llamacpp:spec_decode_*)"
    assert (reading.draft_tokens, reading.verify_steps, reading.accepted_per_position) == (24, 6, (6, 5, 2, 3))
    disagreeing = Acceptance(from_counters.source, draft_tokens=30, accepted_tokens=16, verify_steps=7)
    reading, note = joined(own, disagreeing, None)
    assert reading == own and "differ" in note
    reading, note = joined(own, None, "/metrics refused: other traffic")
    assert reading == own and note == "/metrics refused: other traffic"


def test_a_response_with_verify_steps_is_kept_as_it_is():
    own = Acceptance("vllm metrics.speculative_decoding", draft_tokens=9, accepted_tokens=3, verify_steps=3)
    other = Acceptance("prometheus /metrics (vllm:spec_decode_*)", draft_tokens=9, accepted_tokens=4, verify_steps=3)
    assert joined(own, other, None) == (own, None)
    assert joined(None, other, None) == (other, None)
    assert joined(None, None, "why") == (None, "why")
