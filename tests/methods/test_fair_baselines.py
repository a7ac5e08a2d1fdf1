"""The transformers baselines run as ar does: same EOS semantics, same draft, same cores, same
decode window; methods interleaved per prompt; batch size recorded per request."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch
from cli_fixtures import save_tiny_model
from typer.testing import CliRunner

from ssdbench.cli.main import app
from ssdbench.decoding.recorder import Recorder
from ssdbench.methods.transformers_generate import hf_generate
from ssdbench.models.model_set import ModelSet
from ssdbench.run import session
from ssdbench.run.execute import run_all
from ssdbench.run.plan import build_plan
from ssdbench.run.settings import RunSettings

runner = CliRunner()
MAX_NEW = 10


def greedy_outputs(folder: Path) -> list[list[int]]:
    plan = build_plan(RunSettings(target=str(folder), suite="smoke", num_prompts=3, chat_template=False))
    models, workload, _ = session.prepare(plan)
    return [hf_generate(models.hf_target(), list(p), max_new_tokens=MAX_NEW, temperature=0.0, top_p=1.0,
                        eos_ids=frozenset(), seed=0).output_ids for p in workload.token_ids]


def eos_mid_sequence(outputs: list[list[int]]) -> int | None:
    """A token greedy decoding emits first at position >= 2 and follows with a different token."""
    for out in outputs:
        for i in range(2, len(out) - 2):
            if out[i] not in out[:i] and out[i + 1] != out[i]:
                return out[i]
    return None


@pytest.fixture(scope="module")
def eos_target(tmp_path_factory) -> tuple[Path, int]:
    """A tiny model whose EOS id is a token its greedy decoding reaches mid-sequence."""
    folder = tmp_path_factory.mktemp("eos")
    for seed in range(10):
        eos = eos_mid_sequence(greedy_outputs(save_tiny_model(folder / f"probe{seed}", vocab=64, seed=seed)))
        if eos is not None:
            return save_tiny_model(folder / f"tiny{seed}", vocab=64, seed=seed, eos_token_id=eos), eos
    pytest.fail("no tiny model reached a fresh token mid-sequence")


def run_methods(target: Path, out: Path, *extra: str) -> tuple[dict, object]:
    result = runner.invoke(app, ["run", "--target", str(target), "--suite", "smoke", "--num-prompts", "3",
                                 "--max-new-tokens", str(MAX_NEW), "--no-chat-template", "--k", "3", "--out", str(out),
                                 "--methods", "ar,sd,hf-generate,hf-static,hf-assisted", *extra])
    assert result.exit_code == 0, result.output
    return json.loads((out / "manifest.json").read_text()), pq.read_table(out / "requests.parquet").to_pandas()


def outputs_by_method(requests) -> dict[str, list[list[int]]]:
    ordered = requests.sort_values("request_idx")
    return {m: [list(o) for o in g["output_token_ids"]] for m, g in ordered.groupby("method")}


@pytest.mark.parametrize("draft", ["self-int8", "ngram"])
def test_ignore_eos_emits_eos_and_goes_on_identically_for_every_method(eos_target, tmp_path, draft):
    target, eos = eos_target
    _, requests = run_methods(target, tmp_path / "run", "--ignore-eos", "--draft", draft)
    outputs = outputs_by_method(requests)
    assert set(outputs) == {"ar", "sd", "hf-generate", "hf-static", "hf-assisted"}
    assert all(got == outputs["ar"] for got in outputs.values()), outputs
    assert all(len(o) == MAX_NEW for o in outputs["ar"])
    assert any(eos in o[:-2] for o in outputs["ar"])  # EOS was emitted mid-sequence and decoding went on


def test_without_ignore_eos_every_method_stops_at_eos(eos_target, tmp_path):
    target, eos = eos_target
    _, requests = run_methods(target, tmp_path / "run")
    outputs = outputs_by_method(requests)
    assert all(got == outputs["ar"] for got in outputs.values()), outputs
    stopped = requests[requests["finish_reason"] == "eos"]
    assert len(stopped) == 5 * sum(eos in o for o in outputs["ar"]) > 0
    assert all(list(o)[-1] == eos for o in stopped["output_token_ids"])


def test_assisted_draft_is_the_native_int8_draft(eos_target):
    """hf-assisted's self-int8 assistant computes sd's int8 draft: same logits as the native int8 model,
    not the fp32 target's (which the int8 rounding moves measurably)."""
    target, _ = eos_target
    models = ModelSet(build_plan(RunSettings(target=str(target), draft="self-int8")).models)
    tokens = torch.tensor([[3, 9, 27, 17, 40, 5]])  # [1, T]
    native = models.draft("native")
    native.allocate(1, tokens.shape[1])
    with torch.inference_mode():
        expected = native.forward(tokens, torch.arange(tokens.shape[1])[None])  # [1, T, V]
        assisted = models.hf_draft()(tokens).logits.float()
        dense = models.hf_target()(tokens).logits.float()
    assert torch.allclose(assisted, expected, atol=1e-4)
    assert (dense - expected).abs().max() > 100 * (assisted - expected).abs().max()


def test_the_decode_window_opens_after_one_prefill_forward_and_no_drafting(eos_target):
    """Like ar's: when the first token is noted, the target has run only its prefill, the assistant nothing."""
    target, _ = eos_target
    models = ModelSet(build_plan(RunSettings(target=str(target), draft="self-int8")).models)
    calls: list[tuple[str, int]] = []
    hooks = [m.register_forward_hook(lambda *_, name=name: calls.append((name, time.perf_counter_ns())))
             for name, m in (("target", models.hf_target()), ("draft", models.hf_draft()))]
    try:
        result = hf_generate(models.hf_target(), [3, 9, 27, 17], max_new_tokens=MAX_NEW, temperature=0.0, top_p=1.0,
                             eos_ids=frozenset(), seed=0, assistant=models.hf_draft(), k=3)
    finally:
        for hook in hooks:
            hook.remove()
    before = [name for name, t in calls if t <= result.first_token_ns]
    assert before == ["target"]
    assert any(name == "draft" for name, _ in calls) and len(result.output_ids) == MAX_NEW


@pytest.mark.parametrize("order", ["interleaved", "grouped"])
def test_order_and_per_request_batch_size_are_recorded(eos_target, tmp_path, order):
    target, _ = eos_target
    manifest, requests = run_methods(target, tmp_path / "run", "--order", order, "--batch-size", "2")
    methods = ["ar", "sd", "hf-generate", "hf-static", "hf-assisted"]
    run_order = list(zip(requests["method"], requests["request_idx"]))
    if order == "interleaved":  # each batch of prompts through every method before the next batch
        expected = [(m, i) for batch in ([0, 1], [2]) for m in methods for i in batch]
    else:
        expected = [(m, i) for m in methods for i in range(3)]
    assert run_order == expected
    assert manifest["order"]["order"] == order
    sizes = {m: list(g.sort_values("request_idx")["batch_size"]) for m, g in requests.groupby("method")}
    assert sizes == {"ar": [2, 2, 1], "sd": [2, 2, 1], "hf-generate": [1, 1, 1], "hf-static": [1, 1, 1],
                     "hf-assisted": [1, 1, 1]}
    assert "weight-only int8" in manifest["baselines"]["hf-assisted"]["draft"]
    assert manifest["baselines"]["hf-generate"]["batch_size"] == 1


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or 0 not in os.sched_getaffinity(0), reason="needs core 0")
def test_baselines_run_on_the_targets_cores_and_threads(eos_target):
    target, _ = eos_target
    plan = build_plan(RunSettings(target=str(target), suite="smoke", num_prompts=2, max_new_tokens=4,
                                  chat_template=False, methods=("ar", "hf-generate", "hf-assisted"),
                                  target_device="cpu:0"))
    models, workload, _ = session.prepare(plan)
    seen = set()
    hooks = [m.register_forward_hook(lambda *_: seen.add((frozenset(os.sched_getaffinity(0)), torch.get_num_threads())))
             for m in (models.hf_target(), models.hf_draft())]
    try:
        run_all(plan, models, workload, Recorder(run_id="pinned"), lambda label, n: None)
    finally:
        for hook in hooks:
            hook.remove()
    assert seen == {(frozenset({0}), 1)}


def test_assisted_generate_on_the_real_model_is_greedy_identical_to_generate():
    """Caught on SmolLM2: assisted generate continued from the prefill's cache left the target's greedy
    output after ~20 tokens; tiny random models never got there."""
    models = ModelSet(build_plan(RunSettings(target="smollm2-135m", draft="self-int8")).models)
    prompt = models.tokenizer("def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n").input_ids
    kwargs = dict(max_new_tokens=40, temperature=0.0, top_p=1.0, eos_ids=frozenset(), seed=0)
    plain = hf_generate(models.hf_target(), prompt, **kwargs).output_ids
    assisted = hf_generate(models.hf_target(), prompt, assistant=models.hf_draft(), k=4, **kwargs).output_ids
    assert assisted == plain and len(plain) == 40
