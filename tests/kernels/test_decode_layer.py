"""The fused one-token decode step (kernels/decode_layer.c): it computes what the Python path does,
for every model family and weight format it takes, rows of different lengths included; it is used
only where it applies, and a model says when it runs it."""

import pytest
import torch

from decode_helpers import decode
from test_int8_kernels import isa_build  # noqa: F401  (a fixture: the kernels built per instruction set)
from ssdbench.kernels.gemv import gemv_unavailable_reason
from tests.models.test_native_model import chain, native_of, tiny_hf_model

pytestmark = pytest.mark.skipif(gemv_unavailable_reason("cpu", torch.float32) is not None,
                                reason=f"gemv.c cannot be built here: {gemv_unavailable_reason('cpu', torch.float32)}")

LENGTHS = [5, 9, 7]  # three rows, each at its own length
# torch's: the probe may pick them for tiny shapes
TORCH_INT8_KERNELS = frozenset({"int8pack_mm", "int8_dequant", "int8_bf16", "int8_fbgemm", "int8_onednn"})
# each int8 kernel of ours alone: the probe would otherwise pick among them by timing, and they round differently
OUR_INT8_KERNELS = ("int8_gemv", "int8_dot", "int8_tiles", "int8_vnni")
WEIGHTS = ["fp32", "fp32-packed", *OUR_INT8_KERNELS]  # fp32: gemv.c; fp32-packed: packed_f32.c


def on_our_kernels(weights: str) -> dict:
    """native_of's options for a model whose every projection runs one of our C kernels: fp32's gemv,
    or one int8 kernel (where it can run here)."""
    if weights == "fp32":
        return {"weights": "fp32", "linear_kernel": "gemv"}
    if weights == "fp32-packed":
        return {"weights": "fp32", "linear_kernel": "packed_f32"}
    from ssdbench.kernels.gemv import tiles_i8_unavailable_reason, vnni_i8_unavailable_reason
    from ssdbench.models.int8.select import INT8_CANDIDATES
    if weights == "int8_tiles" and (reason := tiles_i8_unavailable_reason("cpu")) is not None:
        pytest.skip(reason)
    if weights == "int8_vnni" and (reason := vnni_i8_unavailable_reason("cpu")) is not None:
        pytest.skip(reason)
    return {"weights": "int8", "disabled_kernels": frozenset(INT8_CANDIDATES) - {weights}}


def tolerance(model) -> float:
    """How close the fused and Python paths must agree. Their inputs to a projection can differ in the
    last bit (the norms sum in other orders), and kernels that round their input rows turn that into a
    whole rounding step where a value sits on a boundary: tiles_i8.c rounds to 15 bits of a row's largest
    value (a step ~3e-5 of it), dot_i8.c and vnni_i8.c to 8 bits of each block's (~8e-3). gemv.c agrees to float32
    rounding. Far below what a real defect moves (one mask slot flipped moves logits by ~2)."""
    linear = model.kernel_names()["linear"]
    return 3e-2 if "int8_dot" in linear or "int8_vnni" in linear else 1e-3 if "int8_tiles" in linear else 1e-5


def twins(kind: str, weights: str, **shape):
    """Two copies of one model on our C kernels: the first fused, the second on the Python path."""
    hf = tiny_hf_model(kind, **shape)
    fused = native_of(hf, batch_size=len(LENGTHS), **on_our_kernels(weights))
    plain = native_of(hf, batch_size=len(LENGTHS), **on_our_kernels(weights))
    plain.fused_decode = False
    return fused, plain


@pytest.mark.parametrize("kind", ["llama", "qwen2", "qwen3"])  # plain, qkv biases, q/k norms
@pytest.mark.parametrize("weights", WEIGHTS)
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
        tol = tolerance(fused)
        torch.testing.assert_close(got, want, atol=tol, rtol=tol)
        current = want.argmax(-1)
    torch.testing.assert_close(fused.cache.k, plain.cache.k, atol=tol, rtol=tol)
    torch.testing.assert_close(fused.cache.v, plain.cache.v, atol=tol, rtol=tol)


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
    from tests.cli.test_cli_run import base_args, run_cli

    target = save_tiny_model(tmp_path / "tiny", vocab=64, seed=0)
    fused = run_cli(*base_args(target, tmp_path / "a", "--methods", "ar", "--linear-kernel", "gemv"))
    assert fused.exit_code == 0 and "target: gemv, sdpa, fused steps" in fused.output, fused.output
    plain = run_cli(*base_args(target, tmp_path / "b", "--methods", "ar", "--linear-kernel", "matmul"))
    assert plain.exit_code == 0 and "fused steps" not in plain.output


def prefilled_twins(kind: str, weights: str, lengths=LENGTHS, max_len: int = 64, **shape):
    """twins() after each row's own prompt (of `lengths` tokens) went through both."""
    fused, plain = twins(kind, weights, **shape)
    for model in (fused, plain):
        model.allocate(len(lengths), max_len)
    tokens = torch.randint(0, 97, (len(lengths), max(lengths)), generator=torch.Generator().manual_seed(1))  # [B, T]
    for model in (fused, plain):
        model.forward(tokens, chain(tokens.shape[1], batch=len(lengths)))
    return fused, plain


def assert_same_step(fused, plain, tokens, positions, tol: float | None = None, **kwargs):
    got, want = fused.forward(tokens, positions, **kwargs), plain.forward(tokens, positions, **kwargs)
    tol = tolerance(fused) if tol is None else tol
    torch.testing.assert_close(got, want, atol=tol, rtol=tol)
    torch.testing.assert_close(fused.cache.k, plain.cache.k, atol=tol, rtol=tol)
    torch.testing.assert_close(fused.cache.v, plain.cache.v, atol=tol, rtol=tol)
    return want


@pytest.mark.parametrize("kind", ["llama", "qwen2", "qwen3"])
@pytest.mark.parametrize("weights", WEIGHTS)
def test_multi_token_steps_compute_what_the_python_path_does(kind, weights):
    """Prefill, a K+1-token verify per row at each row's own length, then a ragged catch-up chunk."""
    fused, plain = prefilled_twins(kind, weights)
    gen = torch.Generator().manual_seed(2)
    verify = torch.randint(0, 97, (3, 5), generator=gen)  # [B, K+1]
    positions = torch.tensor(LENGTHS).unsqueeze(1) + torch.arange(5)  # [B, K+1]: each row from its own slot
    assert_same_step(fused, plain, verify, positions)
    from ssdbench.decoding.ragged import forward_chunks
    chunks = [[5, 6], [7], [8, 9, 10]]  # rows of different lengths, right-padded
    starts = [n + 2 for n in LENGTHS]
    got, want = forward_chunks(fused, chunks, starts), forward_chunks(plain, chunks, starts)
    tol = tolerance(fused)
    torch.testing.assert_close(got, want, atol=tol, rtol=tol)
    torch.testing.assert_close(fused.cache.k, plain.cache.k, atol=tol, rtol=tol)


def assert_tree_steps_agree(weights: str):
    """ssd's tree: branches of each row at their own positions and slots, each seeing the main line
    up to its accepted count and its own earlier slots only (speculation/tree.py's masks). Heads of 26
    and an MLP of 90 take decode_layer.c's vector loops (4, 8 or 16 lanes) and their scalar tails both."""
    from ssdbench.speculation.tree import Branch, layout_tree

    fused, plain = prefilled_twins("qwen3", weights, max_len=96, head_dim=26, intermediate_size=90)
    branches = [[Branch(a, c, 0.1) for a, c in ((0, 3), (2, 4), (2, 11), (1, 5))],
                [Branch(3, 7, 0.5)],
                [Branch(0, 9, 0.2), Branch(1, 2, 0.2)]]  # rows of 4, 1 and 2 branches: padding branches too
    pending = [n - 1 for n in LENGTHS]
    layout = layout_tree(branches, pending, tree_base=40, depth=4)
    current = torch.randint(0, 97, layout.positions.shape, generator=torch.Generator().manual_seed(3))  # [B, N]
    for step in range(4):
        logits = assert_same_step(fused, plain, current, layout.positions + step, slots=layout.slots(step),
                                  attn_mask=layout.mask(step, 96))
        current = logits.argmax(-1)


@pytest.mark.parametrize("weights", WEIGHTS)
def test_tree_steps_under_masks_compute_what_the_python_path_does(weights):
    assert_tree_steps_agree(weights)


def test_tree_steps_agree_on_every_instruction_set_path(isa_build):
    """decode_layer.c's vectors (GCC's vector extension) built without AVX-512, AVX2 or SSE4.1 split
    into whatever registers are left: each build computes what the Python path does."""
    assert_tree_steps_agree("fp32")


@pytest.mark.parametrize("weights", WEIGHTS)
def test_one_to_sixty_four_rows_of_one_sequence(weights):
    hf = tiny_hf_model("llama")
    fused, plain = (native_of(hf, max_len=512, **on_our_kernels(weights)) for _ in range(2))
    plain.fused_decode = False
    start = 0
    for rows in (1, 2, 3, 4, 5, 7, 16, 33, 64):
        tokens = torch.randint(0, 97, (1, rows), generator=torch.Generator().manual_seed(rows))  # [1, rows]
        assert_same_step(fused, plain, tokens, chain(rows, start))
        start += rows


def test_threads_split_the_work_without_changing_a_bit():
    """The attention's (row, head) pairs and the norms' rows split across threads: the same sums in the same order."""
    fused, _ = prefilled_twins("llama", "int8_dot")
    other, _ = prefilled_twins("llama", "int8_dot")
    tokens = torch.randint(0, 97, (3, 5), generator=torch.Generator().manual_seed(4))  # [B, 5]
    positions = torch.tensor(LENGTHS).unsqueeze(1) + torch.arange(5)  # [B, 5]
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = fused.forward(tokens, positions)
        torch.set_num_threads(2)
        two = other.forward(tokens, positions)
    finally:
        torch.set_num_threads(before)
    assert torch.equal(one, two) and torch.equal(fused.cache.k, other.cache.k)


@pytest.mark.parametrize("slot", [64, -1])
def test_a_slot_outside_the_cache_is_refused_and_nothing_is_written(slot):
    """decode_layer.c checks every slot before writing: a slot equal to the cache length once wrote past its end."""
    fused, plain = prefilled_twins("llama", "fp32")
    k_before = fused.cache.k.clone()
    positions = torch.tensor([[5], [6], [7]])  # [B, 1]: positions are fine; the slots are not
    slots = torch.tensor([[5], [slot], [7]])  # [B, 1]
    with pytest.raises((IndexError, RuntimeError)):
        plain.forward(torch.ones(3, 1, dtype=torch.int64), positions, slots=slots)
    with pytest.raises(IndexError, match="outside"):
        fused.forward(torch.ones(3, 1, dtype=torch.int64), positions, slots=slots)
    assert torch.equal(fused.cache.k, k_before)


def test_steps_the_probe_gave_to_another_kernel_do_not_run_fused():
    """A row split sends steps of split_rows or more to its GEMM side: the fused step must not take them
    with the one-row kernel (it did, while the manifest said the split)."""
    from ssdbench.kernels.linear import RowSplitLinear, make_dense
    from ssdbench.kernels.probe import DenseChoice

    hf = tiny_hf_model("llama")
    model = native_of(hf, max_len=64, linear_kernel="gemv")
    calls = {"many": 0}

    class Counted:
        def __init__(self, linear):
            self.linear = linear

        def __call__(self, x):
            calls["many"] += 1
            return self.linear(x)

    for layer in model.layers:
        for name in ("qkv", "o", "gate_up", "down"):
            gemv = getattr(layer, name)
            split = make_dense(DenseChoice("gemv", "matmul", 3, ()), gemv.w, gemv.bias, device="cpu",
                               dtype=torch.float32)
            assert isinstance(split, RowSplitLinear)
            split.many = Counted(split.many)
            setattr(layer, name, split)
    model._fused = False  # look again at the new projections
    assert model.fused.row_limit == 3 and model.kernel_names()["decode_step"] == "fused<3rows"
    model.forward(torch.ones(1, 2, dtype=torch.int64), chain(2))
    assert calls["many"] == 0  # two rows: the fused step, on gemv.c
    model.forward(torch.ones(1, 3, dtype=torch.int64), chain(3, 2))
    assert calls["many"] == 4 * len(model.layers)  # three rows: the Python path, on the split's GEMM side


def test_a_split_between_two_of_our_kernels_stays_fused_on_both_sides():
    """int8_gemv for few rows, int8_dot for more (a split the probe may choose): each step runs fused on
    the side the probe gave its row count, computing what the Python path computes on that side."""
    from ssdbench.kernels.linear import RowSplitLinear
    from ssdbench.models.int8.rows import Int8DotLinear

    hf = tiny_hf_model("llama")
    fused, plain = (native_of(hf, max_len=64, **on_our_kernels("int8_gemv")) for _ in range(2))
    plain.fused_decode = False
    for model in (fused, plain):
        for layer in model.layers:
            for name in ("qkv", "o", "gate_up", "down"):
                few = getattr(layer, name)
                many = Int8DotLinear(torch.zeros(1), None, device="cpu",
                                     quantized=(few.w_int8, few.scales))  # the same int8 weights
                many.bias, many._bias_ptr = few.bias, few._bias_ptr
                setattr(layer, name, RowSplitLinear(few, many, 3))
        model._fused = False
    assert fused.fused.row_limit > 64 and fused.kernel_names()["decode_step"] == "fused"
    start = 0
    for rows in (1, 2, 3, 5):
        tokens = torch.randint(0, 97, (1, rows), generator=torch.Generator().manual_seed(rows))  # [1, rows]
        assert_same_step(fused, plain, tokens, chain(rows, start), tol=3e-2)  # int8_dot from 3 rows: tolerance()
        start += rows
