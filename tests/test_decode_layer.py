"""The fused one-token decode step (kernels/decode_layer.c): it computes what the Python path does,
for every model family and weight format it takes, rows of different lengths included; it is used
only where it applies, and a model says when it runs it."""

import pytest
import torch

from decode_helpers import decode
from ssdbench.kernels.gemv import gemv_unavailable_reason
from tests.test_native_model import chain, native_of, tiny_hf_model

pytestmark = pytest.mark.skipif(gemv_unavailable_reason("cpu", torch.float32) is not None,
                                reason=f"gemv.c cannot be built here: {gemv_unavailable_reason('cpu', torch.float32)}")

LENGTHS = [5, 9, 7]  # three rows, each at its own length


def twins(kind: str, weights: str):
    """Two copies of one model on gemv.c's kernels: the first fused, the second on the Python path."""
    hf = tiny_hf_model(kind)
    kernel = {"linear_kernel": "gemv"} if weights == "fp32" else {}
    fused = native_of(hf, batch_size=len(LENGTHS), weights=weights, **kernel)
    plain = native_of(hf, batch_size=len(LENGTHS), weights=weights, **kernel)
    plain.fused_decode = False
    return fused, plain


@pytest.mark.parametrize("kind", ["llama", "qwen2", "qwen3"])  # plain, qkv biases, q/k norms
@pytest.mark.parametrize("weights", ["fp32", "int8"])
def test_fused_steps_compute_what_the_python_path_does(kind, weights):
    fused, plain = twins(kind, weights)
    assert fused.fused is not None and plain.fused is None
    tokens = torch.randint(0, 97, (3, max(LENGTHS)), generator=torch.Generator().manual_seed(1))  # [B, T]
    for model in (fused, plain):  # prefill: the Python path for both
        model.forward(tokens, chain(tokens.shape[1], batch=3))
    current = torch.tensor([[int(tokens[r, n - 1])] for r, n in enumerate(LENGTHS)])  # [B, 1]
    for step in range(6):
        positions = torch.tensor([[n + step] for n in LENGTHS])  # [B, 1]: each row at its own slot
        got, want = fused.forward(current, positions), plain.forward(current, positions)
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
        current = want.argmax(-1)
    torch.testing.assert_close(fused.cache.k, plain.cache.k, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(fused.cache.v, plain.cache.v, atol=1e-5, rtol=1e-5)


def test_greedy_decoding_is_the_same_fused_or_not():
    fused, plain = twins("llama", "fp32")
    prompts = [[3, 1, 4, 1, 5], [9, 2, 6, 5, 3, 5, 8]]
    outputs = []
    for model in (fused, plain):
        model.allocate(2, 64)
        batch, _ = decode(model, None, prompts, max_new_tokens=20, k=0)
        outputs.append([row.output_ids for row in batch.rows])
    assert outputs[0] == outputs[1]


def test_it_applies_only_to_gemv_kernels_and_says_so():
    hf = tiny_hf_model("llama")
    on_gemv = native_of(hf, linear_kernel="gemv")
    assert on_gemv.kernel_names()["decode_step"] == "fused" and on_gemv.describe()["decode_step"] == "fused"
    on_matmul = native_of(hf, linear_kernel="matmul")
    assert on_matmul.fused is None and "decode_step" not in on_matmul.kernel_names()
    on_gemv.fused_decode = False
    assert "decode_step" not in on_gemv.kernel_names()


def test_a_run_says_which_roles_ran_fused_steps(tmp_path):
    from cli_fixtures import save_tiny_model
    from test_cli_run import base_args, run_cli

    target = save_tiny_model(tmp_path / "tiny", vocab=64, seed=0)
    fused = run_cli(*base_args(target, tmp_path / "a", "--methods", "ar", "--linear-kernel", "gemv"))
    assert fused.exit_code == 0 and "target: gemv, sdpa, fused one-token steps" in fused.output, fused.output
    plain = run_cli(*base_args(target, tmp_path / "b", "--methods", "ar", "--linear-kernel", "matmul"))
    assert plain.exit_code == 0 and "fused one-token steps" not in plain.output
