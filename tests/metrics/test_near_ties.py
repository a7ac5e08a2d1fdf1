"""Greedy departures from ar are classified on the target's own logits: a near-tie the dtype cannot
resolve, or a real difference; a real difference is never called a near-tie."""

import json

import pytest
import torch

from decode_helpers import decode
from tiny_models import native, tiny_llama_config, tiny_state_dict
from ssdbench.metrics.near_ties import (NEAR_TIE_ULPS, classify, first_difference, greedy_divergences,
                                        next_token_logits, tie_tolerance)
from ssdbench.report.render import divergence_note

PROMPT = [3, 14, 15, 9, 2, 6]
STEPS = 12
TIE_GAP = 1e-3  # logit gap between the twin tokens: a tie to bf16, a real gap to fp32


@pytest.fixture(scope="module")
def twin_model():
    """A tiny model whose lm_head has two near-identical rows (tokens 7 and 8): at every position
    their logits differ by ~TIE_GAP, a near-tie to bf16's resolution but not to fp32's."""
    config = tiny_llama_config(vocab=48)
    state = tiny_state_dict(config, seed=4)
    head = state["lm_head.weight"]  # [V, hidden]
    probe = native(config, state)
    probe.allocate(1, len(PROMPT))
    hidden = probe.forward(torch.tensor([PROMPT]), torch.arange(len(PROMPT)).unsqueeze(0), return_hidden=True)[1]
    h = hidden[0, -1]  # [hidden]: what the lm_head reads at the prompt's end
    lead = float((head @ h).max()) + 2.0  # the twins lead every other token there by 2
    head[7] = h * (lead / float(h @ h))  # logit 7 = lead
    head[8] = h * ((lead + TIE_GAP) / float(h @ h))  # logit 8 = lead + TIE_GAP
    return native(config, state)


def ar_output(model) -> list[int]:
    batch, _ = decode(model, None, [PROMPT], max_new_tokens=STEPS, k=0)
    return list(batch.rows[0].output_ids)


def request(output, *, method="sd", engine="native", prompt_id="p0"):
    return {"method": method, "engine": engine, "suite": "s", "prompt_id": prompt_id, "repeat": 0,
            "prompt_token_ids": PROMPT, "output_token_ids": output}


def test_first_difference():
    assert first_difference([1, 2, 3], [1, 2, 3]) is None
    assert first_difference([1, 2, 3], [1, 5, 3]) == 1
    assert first_difference([1, 2], [1, 2, 3]) == 2


def test_the_tolerance_follows_the_dtype_and_the_logits_size():
    assert tie_tolerance(torch.bfloat16, 10.0) == pytest.approx(NEAR_TIE_ULPS * 2**-7 * 10)
    assert tie_tolerance(torch.float32, 10.0) < tie_tolerance(torch.float16, 10.0) < tie_tolerance(torch.bfloat16, 10.0)
    assert tie_tolerance(torch.bfloat16, 0.01) == tie_tolerance(torch.bfloat16, 1.0)  # never below one unit's worth


def test_a_flip_between_twin_tokens_is_a_near_tie_in_bf16_and_a_difference_in_fp32(twin_model):
    ar = ar_output(twin_model)
    logits_of = lambda ids: next_token_logits(twin_model, ids)  # noqa: E731
    assert ar[0] in (7, 8), ar  # the twins lead at the first step
    flipped = [15 - ar[0]] + ar[1:]  # the other twin: 7 <-> 8
    bf16 = classify("sd", request(flipped), ar, logits_of, torch.bfloat16)
    assert bf16.position == 0 and {bf16.ar_token, bf16.token} == {7, 8}
    assert 0 <= bf16.margin < 2 * TIE_GAP and bf16.near_tie
    fp32 = classify("sd", request(flipped), ar, logits_of, torch.float32)
    assert fp32.margin == pytest.approx(bf16.margin) and not fp32.near_tie


def test_a_token_the_target_ranks_far_below_is_not_a_near_tie(twin_model):
    ar = ar_output(twin_model)
    logits = next_token_logits(twin_model, PROMPT + ar[:3])  # [V]
    worst = int(logits.argmin())
    departed = ar[:3] + [worst] + ar[4:]
    found = classify("sd", request(departed), ar, lambda ids: next_token_logits(twin_model, ids), torch.bfloat16)
    assert found.position == 3 and found.token == worst and found.margin > found.tolerance and not found.near_tie
    note = divergence_note([found.describe()])
    assert "1 NOT near-ties (sd; widest: prompt p0 token 3" in note and "near-ties the dtype" not in note


def test_the_run_check_pairs_each_variant_with_ars_request(twin_model):
    ar = ar_output(twin_model)
    rows = [request(ar, method="ar"), request(ar), request([15 - ar[0]] + ar[1:], method="ssd"),
            request(ar[:5], method="hf-generate", engine="transformers"),  # stopped early: no token chosen differently
            request([15 - ar[0]], prompt_id="other")]  # no ar request to pair with
    columns = {name: [r[name] for r in rows] for name in rows[0]}
    calls = []

    def logits_of(ids):
        calls.append(ids)
        return next_token_logits(twin_model, ids)

    found = greedy_divergences(columns, logits_of, torch.bfloat16)
    assert [(d.label, d.position) for d in found] == [("ssd", 0)] and len(calls) == 1
    note = divergence_note([d.describe() for d in found])
    assert "1 at near-ties" in note and "ssd" in note and "NOT" not in note


@pytest.mark.parametrize("server_dtype, near_tie", [("BF16", True), ("bfloat16", True), ("all F32", False),
                                                     ("Q4_0", None), (None, None)])
def test_a_servers_departure_is_bounded_by_its_own_dtype_or_unverifiable(twin_model, server_dtype, near_tie):
    """A flip between the twins on an fp32 run: a near-tie for a bf16 server, a real difference for an fp32 one,
    and unverifiable where the server reports no float dtype (never "not a near-tie" on the run's fp32 bound)."""
    from ssdbench.run.session import _server_bound

    ar = ar_output(twin_model)
    rows = [request(ar, method="ar"), request([15 - ar[0]] + ar[1:], method="llama", engine="endpoint-c1")]
    columns = {name: [r[name] for r in rows] for name in rows[0]}
    bound = _server_bound(torch.float32, server_dtype)
    found = greedy_divergences(columns, lambda ids: next_token_logits(twin_model, ids), torch.float32,
                               dtype_of=lambda label: bound)
    assert [(d.label, d.near_tie) for d in found] == [("llama@endpoint-c1", near_tie)]
    note = divergence_note([d.describe() for d in found])
    if near_tie is None:
        assert "1 unverifiable (llama@endpoint-c1: the server reports no float dtype" in note and "NOT" not in note
    else:
        assert ("NOT near-ties" in note) == (not near_tie)


def test_a_greedy_run_records_that_nothing_departed(tmp_path):
    from cli_fixtures import save_tiny_model
    from tests.cli.test_cli_run import base_args, run_cli

    target = save_tiny_model(tmp_path / "tiny", vocab=64, seed=0)
    out = tmp_path / "run"
    result = run_cli(*base_args(target, out, "--methods", "ar,sd", "--k", "3"))
    assert result.exit_code == 0, result.output
    assert json.loads((out / "manifest.json").read_text())["greedy_divergences"] == []
    assert "Greedy outputs identical to ar" in result.output and "departing" not in result.output


def bf16_departures(device: str, verify=None) -> tuple[list, int]:
    """sd against ar on a tiny bf16 model with flat logits (near-ties common): each request's first
    departure, classified on the target's own logits; and the number of requests."""
    from ssdbench.decoding.draft_model import DraftModelProposer
    from ssdbench.models.build import build_native_model
    from tiny_models import perturbed
    from decode_helpers import sampling_rows

    config = tiny_llama_config(vocab=256, layers=4, hidden=128)
    state = tiny_state_dict(config, seed=11, head_scale=1.0)
    build = lambda s: build_native_model(config, s, device=device, dtype=torch.bfloat16)  # noqa: E731
    target, draft = build(state), build(perturbed(state, scale=0.3, seed=12))
    prompts = [[(7 * r + j) % 256 for j in range(6 + r)] for r in range(6)]
    ar, _ = decode(target, None, prompts, max_new_tokens=24, k=0)
    proposer = DraftModelProposer(draft, k=4, sampling=sampling_rows(len(prompts), 0.0),
                                  generator=torch.Generator().manual_seed(0))
    sd, _ = decode(target, proposer, prompts, max_new_tokens=24, k=4, **({"verify": verify} if verify else {}))
    found = []
    for prompt, a, b in zip(prompts, ar.rows, sd.rows):
        row = {"prompt_token_ids": prompt, "output_token_ids": b.output_ids, "prompt_id": str(prompt[:2]), "repeat": 0}
        if (d := classify("sd", row, a.output_ids, lambda ids: next_token_logits(target, ids), torch.bfloat16,
                          layers=config.num_hidden_layers)):
            found.append(d)
    return found, len(prompts)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(
    not torch.cuda.is_available(), reason="no CUDA device here: ci/gpu_check.sh runs this on a GPU machine")])])
def test_bf16_sd_departs_from_ar_only_at_near_ties(device, capsys):
    """In bf16 the K+1-token verify and the one-token step round differently: sd may depart from ar,
    but only where the target's call was a near-tie; each departure is reported. A rule that
    draws the bonus token uniformly departs where the target was sure: the same check catches it."""
    from biased_rules import uniform_bonus

    departures, num_requests = bf16_departures(device)
    with capsys.disabled():
        print(f"\n[{device} bf16] sd departed from ar on {len(departures)}/{num_requests} requests "
              f"(position, margin, tolerance):", [(d.position, round(d.margin, 4), round(d.tolerance, 4))
                                                 for d in departures])
    assert all(d.near_tie for d in departures), departures
    biased, _ = bf16_departures(device, verify=uniform_bonus)
    assert any(not d.near_tie for d in biased), biased


SHIPPED_PROMPTS = ('def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n',
                   "import numpy as np\n\ndef mean(xs):\n")
SHIPPED_STEPS = 16
RUNNERS_UP = 4  # margins between the top token and each of the next 4: the flips that can happen
RANK_OF_A_REAL_DEPARTURE = 10  # a token the target ranks 10th is far from a near-tie


@pytest.fixture(scope="module")
def shipped_twins():
    """The shipped SmolLM2-135M (30 layers) twice on the same fp32 weights, summing in two orders: fused
    one-row steps on gemv.c (ar's path) and the Python path on MKL's sgemm (a verify's), a greedy prefix."""
    from ssdbench.kernels.gemv import gemv_unavailable_reason
    from ssdbench.models.build import build_native_model
    from ssdbench.models.checkpoint.source import resolve_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if (reason := gemv_unavailable_reason("cpu", torch.float32)) is not None:
        pytest.skip(f"gemv.c cannot be built here: {reason}")
    folder = str(resolve_model("default").path)
    hf = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    fused = build_native_model(hf.config, hf.state_dict(), linear_kernel="gemv")
    plain = build_native_model(hf.config, hf.state_dict(), linear_kernel="matmul")
    plain.fused_decode = False
    assert fused.kernel_names().get("decode_step") == "fused" and "decode_step" not in plain.kernel_names()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    prompts = [tokenizer(text).input_ids for text in SHIPPED_PROMPTS]
    return fused, plain, prompts, hf.config.num_hidden_layers


def fused_steps(model, prompt: list[int], steps: int) -> tuple[list[int], list[torch.Tensor]]:
    """Greedy one-token steps after a prefill: the tokens chosen and each step's logits [V]."""
    model.allocate(1, len(prompt) + steps + 1)
    logits = model.forward(torch.tensor([prompt]), torch.arange(len(prompt)).unsqueeze(0))[0, -1]  # [V]
    chosen, seen = [], [logits]
    for _ in range(steps):
        chosen.append(int(logits.argmax()))
        position = torch.tensor([[len(prompt) + len(chosen) - 1]])
        logits = model.forward(torch.tensor([[chosen[-1]]]), position)[0, -1]  # [V]
        seen.append(logits)
    return chosen, seen[:-1]


def test_on_the_shipped_30_layer_model_summation_order_alone_departs_only_at_a_near_tie(shipped_twins, capsys):
    """Where the two paths' margin between two tokens differs by `shift`, summation order alone can flip
    the choice only where that margin is within `shift`; so every `shift` must be within the tolerance for
    a depth of 30 layers. A departure to a token the target ranks 10th is classed as real."""
    fused, plain, prompts, layers = shipped_twins
    worst = 0.0
    for prompt in prompts:
        chosen, fused_logits = fused_steps(fused, prompt, SHIPPED_STEPS)
        for at, x in enumerate(fused_logits):
            y = next_token_logits(plain, prompt + chosen[:at])  # [V]: the Python path, as the run's check reads it
            top, *runners_up = (int(i) for i in y.topk(1 + RUNNERS_UP).indices)
            for other in runners_up:
                shift = abs(float((x[top] - x[other]) - (y[top] - y[other])))
                tolerance = tie_tolerance(torch.float32, float(y[top]), float(y[other]), layers=layers)
                worst = max(worst, shift / tolerance)
                assert shift <= tolerance, (at, shift, tolerance)
    with capsys.disabled():
        print(f"\n[shipped model, {layers} layers] fused gemv against sgemm: the largest margin shift is "
              f"{worst:.2f} of the tolerance ({worst * layers ** 0.5:.2f} of one layer's)")

    prompt = prompts[0]
    chosen, _ = fused_steps(fused, prompt, SHIPPED_STEPS)
    at = SHIPPED_STEPS // 2
    ranked = next_token_logits(plain, prompt + chosen[:at]).argsort(descending=True)
    departed = chosen[:at] + [int(ranked[RANK_OF_A_REAL_DEPARTURE - 1])]
    row = {"prompt_token_ids": prompt, "output_token_ids": departed, "prompt_id": "p", "repeat": 0}
    found = classify("sd", row, chosen, lambda ids: next_token_logits(plain, ids), torch.float32, layers=layers)
    assert found is not None and found.position == at and not found.near_tie, found
