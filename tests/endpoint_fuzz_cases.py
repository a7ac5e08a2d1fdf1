"""Answers in the engines' formats (vLLM and llama.cpp completions and chat streams, SGLang's and
TensorRT-LLM's figures, /v1/models, /metrics), and seeded mutations of them: a field removed, retyped,
made huge, negative, NaN or nested wrongly. For the endpoint fuzz test; the shapes follow each engine's
documented answers, with the fields ssdbench reads and a few it does not."""

from __future__ import annotations

import copy
import json
import math
import random

DEEP = "__deep__"  # stands for JSON nested far deeper than a parser's recursion goes
DEEP_JSON = "[" * 100_000 + "]" * 100_000


def odd_values() -> list:
    return [None, True, False, 0, -1, -10**9, 2**31, 10**30, 1e308, 3.5, -0.5, math.nan, math.inf, -math.inf,
            "", "abc", "12", "x" * 100_000, "\ud800", [], [1, "a"], [None], list(range(10_000)), {}, {"a": 1},
            [[[]]], {"choices": 5}, DEEP]


def _chunk(text: str, ids: list[int], finish: str | None, **extra) -> dict:
    return {"id": "cmpl-1", "object": "text_completion", "created": 1_700_000_000, "model": "m",
            "choices": [{"index": 0, "text": text, "token_ids": ids, "logprobs": None, "finish_reason": finish,
                         **extra}], "usage": None}


def vllm_completions() -> list[dict]:
    spec = {"num_spec_steps": 2, "num_draft_tokens": 4, "num_accepted_draft_tokens": 2,
            "mean_acceptance_length": 2.0, "draft_acceptance_rate": 0.5, "per_step_accepted": [1, 1],
            "per_step_drafted": [2, 2]}
    return [_chunk("ab", [5, 6], None), _chunk("c", [7], "length"),
            {"id": "cmpl-1", "object": "text_completion", "model": "m", "choices": [],
             "usage": {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6,
                       "prompt_tokens_details": {"cached_tokens": 0}},
             "metrics": {"speculative_decoding": spec}}]


def llama_cpp_completions() -> list[dict]:
    final = {"choices": [{"index": 0, "text": "", "finish_reason": "length"}], "model": "m",
             "object": "text_completion", "usage": {"completion_tokens": 3, "prompt_tokens": 3, "total_tokens": 6},
             "timings": {"prompt_n": 3, "prompt_ms": 1.5, "predicted_n": 3, "predicted_ms": 4.0, "draft_n": 4,
                         "draft_n_accepted": 2}}
    return [{"choices": [{"index": 0, "text": "ab", "finish_reason": None}], "model": "m"},
            {"choices": [{"index": 0, "text": "c", "finish_reason": None}], "model": "m"}, final]


def chat() -> list[dict]:
    def delta(content, finish=None):
        return {"id": "chat-1", "object": "chat.completion.chunk", "model": "m",
                "choices": [{"index": 0, "delta": {"role": "assistant", "content": content}, "finish_reason": finish}]}
    return [delta("ab"), delta("c", "length"), {"model": "m", "choices": [], "usage": {"completion_tokens": 3}}]


def sglang() -> list[dict]:
    events = llama_cpp_completions()
    del events[-1]["timings"]
    events[-1]["sglext"] = {"spec_tokens_details": {"spec_verify_ct": 2, "spec_num_proposed_drafts": 4,
                                                    "spec_num_correct_drafts": 2, "spec_accept_length": 2.0}}
    return events


def trtllm() -> list[dict]:
    events = llama_cpp_completions()
    del events[-1]["timings"]
    events[-1]["choices"][0]["avg_decoded_tokens_per_iter"] = 1.8
    return events


STREAMS = {"vllm completions": (vllm_completions, "completions"), "llama.cpp completions":
           (llama_cpp_completions, "completions"), "chat": (chat, "chat"), "sglang": (sglang, "completions"),
           "tensorrt-llm": (trtllm, "completions")}


def models(owner: str) -> dict:
    entry = {"id": "m", "object": "model", "created": 1_700_000_000, "owned_by": owner, "root": "m", "parent": None,
             "max_model_len": 2048, "permission": [{"id": "perm", "allow_sampling": True}]}
    return {"object": "list", "data": [entry]}


def metrics(family: str, posts: int) -> str:
    """Counters as the engine prints them, counting 3 tokens, 2 drafted, 1 accepted, 1 step per request."""
    generated, drafted, accepted, steps = 100 + 3 * posts, 2 * posts, posts, posts
    if family == "llamacpp":
        names = ("llamacpp:tokens_predicted_total", "llamacpp:spec_decode_num_draft_tokens_total",
                 "llamacpp:spec_decode_num_accepted_tokens_total", "llamacpp:spec_decode_num_drafts_total")
        labels, per_pos = "", "llamacpp:spec_decode_num_accepted_tokens_per_pos_total"
    else:
        names = ("vllm:generation_tokens_total", "vllm:spec_decode_num_draft_tokens_total",
                 "vllm:spec_decode_num_accepted_tokens_total", "vllm:spec_decode_num_drafts_total")
        labels, per_pos = 'engine="0",model_name="m"', "vllm:spec_decode_num_accepted_tokens_per_pos_total"
    lines = [f"# TYPE {names[0]} counter"]
    lines += [f"{name}{{{labels}}} {value}" if labels else f"{name} {value}"
              for name, value in zip(names, (generated, drafted, accepted, steps))]
    sep = "," if labels else ""
    lines.append(f'{per_pos}{{{labels}{sep}position="0"}} {accepted}')
    return "\n".join(lines) + "\n"


def _paths(doc, prefix=()) -> list[tuple]:
    found = [prefix]
    if isinstance(doc, dict):
        for key, value in doc.items():
            found += _paths(value, (*prefix, key))
    elif isinstance(doc, list) and len(doc) < 100:
        for i, value in enumerate(doc):
            found += _paths(value, (*prefix, i))
    return found


def mutated(doc, rng: random.Random, *, times: int = 1):
    """`doc` with `times` random fields removed, retyped or nested wrongly (a copy)."""
    doc = copy.deepcopy(doc)
    for _ in range(times):
        paths = [p for p in _paths(doc) if p]
        if not paths:
            return rng.choice(odd_values())
        *parent_path, key = rng.choice(paths)
        parent = doc
        for step in parent_path:
            parent = parent[step]
        operation = rng.choice(("remove", "retype", "retype", "wrap"))
        if operation == "remove":
            del parent[key]
        elif operation == "retype":
            parent[key] = rng.choice(odd_values())
        else:
            parent[key] = rng.choice(([parent[key]], {"value": parent[key]}, [[parent[key]]]))
    return doc


def dumped(value) -> str:
    text = json.dumps(value)
    return text.replace(json.dumps(DEEP), DEEP_JSON)


def mutated_metrics(text: str, rng: random.Random) -> str:
    """A /metrics text with one sample line's value or labels made odd, or a line dropped."""
    lines = text.splitlines()
    i = rng.randrange(1, len(lines))
    name, _, value = lines[i].rpartition(" ")
    operation = rng.choice(("value", "value", "drop", "position"))
    if operation == "drop":
        del lines[i]
    elif operation == "position":
        lines[i] = lines[i].replace('position="0"', f'position="{rng.choice(["99999999999", "-1", "x", "3"])}"')
    else:
        lines[i] = f"{name} {rng.choice(['NaN', '+Inf', '-Inf', '-5', '1e300', '9007199254740993', 'abc', '0x10'])}"
    return "\n".join(lines) + "\n"
