"""CUDA graphs (models/cuda_graphs.py): the static-shape forward they replay computes what the dynamic
one does (checked here on CPU), `--cuda-graphs` refuses what it cannot do in one line, and on a GPU a
graphed model decodes exactly as the eager one (run by ci/gpu_check.sh; skipped without CUDA)."""

import pytest
import torch

from cli_checks import assert_one_line_error
from cli_fixtures import save_tiny_model
from ssdbench.models.cuda_graphs import GraphedModel, uses_cuda_graphs
from ssdbench.errors import UsageError
from tests.test_native_model import chain, native_of, tiny_hf_model

NO_CUDA = "no CUDA device here: ci/gpu_check.sh runs this on a GPU machine"


def _greedy(model, prompt: torch.Tensor, steps: int) -> list[int]:
    """Prefill, then `steps` one-token decode steps; the tokens chosen."""
    logits = model(prompt, chain(prompt.shape[1]))
    tokens = [int(logits[0, -1].argmax())]
    for i in range(steps - 1):
        pos = torch.tensor([[prompt.shape[1] + i]], device=prompt.device)
        tokens.append(int(model(torch.tensor([[tokens[-1]]], device=prompt.device), pos)[0, -1].argmax()))
    return tokens


def test_static_shapes_compute_what_the_dynamic_forward_does():
    hf = tiny_hf_model("llama")
    dynamic, static = native_of(hf, max_len=48), native_of(hf, max_len=48)
    static.static_shapes = True
    prompt = torch.randint(0, 97, (1, 9), generator=torch.Generator().manual_seed(4))  # [1, T]
    assert _greedy(static, prompt, 12) == _greedy(dynamic, prompt, 12)
    verify, slots = torch.tensor([[3, 8, 1, 40, 2]]), torch.arange(21, 26)[None]  # a K+1 = 5 token verify
    torch.testing.assert_close(static(verify, slots), dynamic(verify, slots), rtol=1e-5, atol=1e-5)
    tree = torch.ones(1, 5, 48, dtype=torch.bool).tril(diagonal=20)  # [B, T, S_max] explicit mask
    tree[0, 3, 23] = False  # one branch that does not see its elder sibling
    torch.testing.assert_close(static(verify, slots, attn_mask=tree), dynamic(verify, slots, attn_mask=tree),
                               rtol=1e-5, atol=1e-5)


def test_modes_and_devices():
    assert not uses_cuda_graphs("auto", "cpu") and not uses_cuda_graphs("off", "cpu")
    with pytest.raises(UsageError, match="--cuda-graphs on needs a CUDA device"):
        uses_cuda_graphs("on", "cpu")
    with pytest.raises(UsageError, match="--cuda-graphs must be one of"):
        uses_cuda_graphs("sometimes", "cpu")


@pytest.mark.parametrize("value,fragments", [("on", ("--cuda-graphs on needs a CUDA device",)),
                                             ("maybe", ("--cuda-graphs", "maybe"))])
def test_the_cli_refuses_graphs_it_cannot_run(tmp_path, value, fragments):
    from typer.testing import CliRunner

    from ssdbench.cli.main import app

    folder = save_tiny_model(tmp_path / "tiny")
    result = CliRunner().invoke(app, ["run", "--target", str(folder), "--suite", "smoke", "--num-prompts", "1",
                                      "--cuda-graphs", value, "--out", str(tmp_path / "run")])
    assert_one_line_error(result, *fragments)
    assert not (tmp_path / "run").exists()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_CUDA)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_graphed_model_decodes_as_the_eager_one_on_cuda(dtype):
    hf = tiny_hf_model("llama")
    eager = native_of(hf, max_len=64, device="cuda", dtype=dtype)
    eager.static_shapes = True  # the same arithmetic: graphs must change launches, not results
    graphed = GraphedModel(native_of(hf, max_len=64, device="cuda", dtype=dtype))
    prompt = torch.randint(0, 97, (1, 40), generator=torch.Generator().manual_seed(5)).cuda()  # eager prefill
    assert _greedy(graphed, prompt, 16) == _greedy(eager, prompt, 16)
    assert (1, 1) in graphed.graph_shapes
    verify, slots = torch.tensor([[3, 8, 1, 40, 2]]).cuda(), torch.arange(56, 61)[None].cuda()
    torch.testing.assert_close(graphed(verify, slots), eager(verify, slots))
    assert (1, 5) in graphed.graph_shapes
