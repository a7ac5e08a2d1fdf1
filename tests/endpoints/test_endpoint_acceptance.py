"""Per-request acceptance read from each engine's documented response shape (vLLM, SGLang and
TensorRT-LLM cannot run here; llama.cpp's shape is also checked against the real server in
test_endpoint_llama_server.py)."""

from __future__ import annotations

from ssdbench.endpoints.engines import llama_cpp, sglang, trtllm, vllm
from ssdbench.endpoints.engines.registry import detect

# vLLM, --per-request-spec-decode-metrics detailed: the final usage chunk of a stream
VLLM_FINAL_CHUNK = {
    "id": "cmpl-1", "object": "text_completion", "model": "Qwen/Qwen3-0.6B", "choices": [],
    "usage": {"prompt_tokens": 12, "completion_tokens": 9, "total_tokens": 21},
    "metrics": {"speculative_decoding": {
        "num_spec_steps": 4, "num_draft_tokens": 12, "num_accepted_draft_tokens": 5,
        "mean_acceptance_length": 2.25, "draft_acceptance_rate": 5 / 12,
        "acceptance_histogram": [1, 1, 2, 0], "per_step_accepted": [0, 1, 2, 2], "per_step_drafted": [3, 3, 3, 3]}},
}
# SGLang OpenAI endpoint with return_spec_tokens_details
SGLANG_EXT = {"choices": [{"index": 0, "text": "", "finish_reason": "length"}], "sglext": {"spec_tokens_details": {
    "spec_accept_rate": 0.5, "spec_accept_length": 3.0, "spec_num_correct_drafts": 20, "spec_num_proposed_drafts": 40,
    "spec_verify_ct": 10, "spec_correct_drafts_histogram": [1, 2, 3, 4]}}}
# SGLang /generate
SGLANG_META = {"text": "...", "meta_info": {"completion_tokens": 30, "spec_verify_ct": 12, "spec_accept_length": 2.5}}
# TensorRT-LLM's OpenAI server
TRTLLM = {"choices": [{"index": 0, "text": "x", "finish_reason": "length", "avg_decoded_tokens_per_iter": 2.75}]}
# llama-server's final chunk with a draft model
LLAMA_CPP = {"choices": [{"text": "", "index": 0, "finish_reason": "length"}],
             "timings": {"prompt_n": 5, "predicted_n": 32, "draft_n": 40, "draft_n_accepted": 26}}


def test_vllm_detailed_metrics():
    reading = detect([{"choices": [{"text": "a"}]}, VLLM_FINAL_CHUNK])
    assert reading.source == vllm.SOURCE
    assert (reading.draft_tokens, reading.accepted_tokens, reading.verify_steps) == (12, 5, 4)
    assert reading.acceptance_length == 2.25
    assert reading.accepted_per_step == (0, 1, 2, 2)
    assert reading.rate == 5 / 12


def test_vllm_summary_has_no_per_step_counts():
    summary = {"metrics": {"speculative_decoding": {"num_spec_steps": 3, "num_draft_tokens": 9,
                                                     "num_accepted_draft_tokens": 3, "mean_acceptance_length": 2.0}}}
    reading = detect([summary])
    assert reading.accepted_per_step is None and reading.verify_steps == 3


def test_sglang_openai_extension_and_generate_meta_info():
    ext = detect([SGLANG_EXT])
    assert ext.source == sglang.SOURCE_EXT
    assert (ext.draft_tokens, ext.accepted_tokens, ext.verify_steps, ext.acceptance_length) == (40, 20, 10, 3.0)
    meta = detect([SGLANG_META])
    assert meta.source == sglang.SOURCE_META
    assert (meta.verify_steps, meta.acceptance_length, meta.draft_tokens) == (12, 2.5, None)


def test_tensorrt_llm_tokens_per_iteration_is_an_acceptance_length():
    reading = detect([TRTLLM])
    assert reading.source == trtllm.SOURCE
    assert reading.acceptance_length == 2.75 and reading.rate is None and reading.verify_steps is None


def test_llama_cpp_gives_a_rate_and_no_verify_steps():
    reading = detect([{"choices": [{"text": "a"}], "timings": {"predicted_n": 1}}, LLAMA_CPP])
    assert reading.source == llama_cpp.SOURCE
    assert (reading.draft_tokens, reading.accepted_tokens) == (40, 26)
    assert reading.verify_steps is None and reading.acceptance_length is None
    assert reading.rate == 26 / 40


def test_no_speculation_fields_reads_as_none():
    plain = {"choices": [{"text": "x", "finish_reason": "stop"}], "timings": {"predicted_n": 8},
             "usage": {"completion_tokens": 8}}
    assert detect([plain]) is None
    assert detect([{"metrics": None, "sglext": None, "meta_info": "x", "choices": None}]) is None


def test_the_last_event_with_figures_wins():
    early = {"timings": {"draft_n": 4, "draft_n_accepted": 1}}
    assert detect([early, LLAMA_CPP]).draft_tokens == 40
