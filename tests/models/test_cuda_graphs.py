"""CUDA graphs (models/cuda_graphs.py): the static-shape forward they replay computes what the dynamic
one does (checked here on CPU), `--cuda-graphs` refuses what it cannot do in one line, and on a GPU a
graphed model decodes exactly as the eager one (run by ci/gpu_check.sh; skipped without CUDA)."""

import pytest
import torch

from cli_checks import assert_one_line_error
from cli_fixtures import save_tiny_model
from ssdbench.models.cuda_graphs import GraphedModel, uses_cuda_graphs
from ssdbench.errors import UsageError
from tests.models.test_native_model import chain, native_of, tiny_hf_model

NO_CUDA = "no CUDA device here: ci/gpu_check.sh runs this on a GPU machine"


def _greedy(model, prompt: torch.Tensor, steps: int) -> list[int]:
    """Prefill, then `steps` one-token decode steps; the tokens chosen."""
    logits = model(prompt, chain(prompt.shape[1]).to(prompt.device))
    tokens = [int(logits[0, -1].argmax())]
    for i in range(steps - 1):
        pos = torch.tensor([[prompt.shape[1] + i]], device=prompt.device)
        tokens.append(int(model(torch.tensor([[tokens[-1]]], device=prompt.device), pos)[0, -1].argmax()))
    return tokens


def _eager_and_graphed(hf, *, max_len: int, device="cuda", dtype=torch.float32, **graphed_options):
    """Two CUDA twins of `hf`: one eager with the static shapes graphs replay (the same arithmetic:
    graphs must change launches, not results), one graphed."""
    eager = native_of(hf, max_len=max_len, device=device, dtype=dtype)
    eager.static_shapes = True
    return eager, GraphedModel(native_of(hf, max_len=max_len, device=device, dtype=dtype), **graphed_options)


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


def test_a_smaller_batch_decodes_on_the_first_rows_of_the_graphs_cache():
    """Graphs read the buffers they were captured on, so batches of one capacity share one cache:
    a smaller batch takes its first rows (views), zeroed, and decodes as on a cache of its own."""
    hf = tiny_hf_model("llama")
    graphed = GraphedModel(native_of(hf, max_len=48))  # off CUDA it captures nothing: its steps run eagerly
    graphed.allocate(3, 48)
    storage = graphed.model.cache
    graphed.model.forward(torch.tensor([[5, 6]] * 3), chain(2, batch=3))  # eager: leaves K/V in every row
    graphed.allocate(2, 48)
    cache = graphed.model.cache
    assert (cache.batch_size, cache.max_len) == (2, 48)
    assert cache.k.data_ptr() == storage.k.data_ptr() and cache.v.data_ptr() == storage.v.data_ptr()
    assert not cache.k.any() and not cache.v.any()  # zeroed in place, as a fresh allocation is

    prompt = torch.randint(0, 97, (2, 7), generator=torch.Generator().manual_seed(3))  # [2, T]
    fresh = native_of(hf, max_len=48, batch_size=2)
    fresh.static_shapes = True
    torch.testing.assert_close(graphed.model.forward(prompt, chain(7, batch=2)), fresh(prompt, chain(7, batch=2)),
                               rtol=0, atol=0)

    graphed.allocate(3, 48)  # back to the largest batch: the same buffers again
    assert graphed.model.cache.k.data_ptr() == storage.k.data_ptr()
    graphed.allocate(4, 48)  # a larger batch, or another capacity, needs new buffers
    assert graphed.model.cache.batch_size == 4 and graphed.model.cache.k.data_ptr() != storage.k.data_ptr()
    graphed.allocate(4, 56)
    assert graphed.model.cache.max_len == 56


def test_a_cpu_role_of_a_run_with_graphs_on_gets_none(tmp_path):
    """`--cuda-graphs on` is checked against every role's device by the plan (one on CUDA is enough,
    e.g. --sd-draft-device); a model on the CPU then runs as it is, not refused mid-run."""
    from ssdbench.models.model_set import ModelSet, ModelSettings

    models = ModelSet(ModelSettings(target=str(save_tiny_model(tmp_path / "tiny")), device="cpu", cuda_graphs="on"))
    assert not isinstance(models.target("native"), GraphedModel)


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
    eager, graphed = _eager_and_graphed(hf, max_len=64, dtype=dtype)
    prompt = torch.randint(0, 97, (1, 40), generator=torch.Generator().manual_seed(5)).cuda()  # eager prefill
    assert _greedy(graphed, prompt, 16) == _greedy(eager, prompt, 16)
    assert (1, 1, False) in graphed.graph_shapes
    verify, slots = torch.tensor([[3, 8, 1, 40, 2]]).cuda(), torch.arange(56, 61)[None].cuda()
    torch.testing.assert_close(graphed(verify, slots), eager(verify, slots))
    assert (1, 5, False) in graphed.graph_shapes


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_CUDA)
def test_a_graphed_tree_step_takes_each_calls_own_mask():
    """ssd's tree steps replay one graph per width; the mask is an input, not baked into the graph."""
    hf = tiny_hf_model("llama")
    eager, graphed = _eager_and_graphed(hf, max_len=48, max_tokens=2)
    prompt = torch.randint(0, 97, (1, 20), generator=torch.Generator().manual_seed(4)).cuda()  # [1, T]
    for model in (eager, graphed):
        model(prompt, chain(20).cuda())
    branches, slots = torch.tensor([[3, 8, 1, 40, 2]]).cuda(), torch.arange(21, 26)[None].cuda()  # [1, N]
    for hidden in (23, 24, 22):  # a branch that does not see one of its elders, a different one each call
        tree = torch.ones(1, 5, 48, dtype=torch.bool).tril(diagonal=21)  # [B, N, S_max]: branch n at slot 21 + n
        tree[0, 4, hidden] = False
        got, want = graphed(branches, slots, attn_mask=tree.cuda()), eager(branches, slots, attn_mask=tree.cuda())
        torch.testing.assert_close(got, want)
    assert graphed.graph_shapes == [(1, 5, True)]  # one capture, three replays


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_CUDA)
def test_graphs_are_captured_at_allocation_and_outlive_batches_of_one_capacity_on_cuda():
    hf = tiny_hf_model("llama")
    eager, graphed = _eager_and_graphed(hf, max_len=64, max_tokens=5, tree_widths=3)
    graphed.allocate(1, 64)  # every step shape of one row, captured before any timed round
    assert graphed.graph_shapes == sorted([(1, t, False) for t in range(1, 6)] + [(1, n, True) for n in range(1, 4)])
    captured = dict(graphed._graphs)
    prompt = torch.randint(0, 97, (1, 12), generator=torch.Generator().manual_seed(6)).cuda()
    first = _greedy(graphed, prompt, 6)
    assert first == _greedy(eager, prompt, 6)  # the captures' writes were zeroed away
    graphed.allocate(1, 64)  # the next batch of the run: same capacity, same buffers
    assert _greedy(graphed, prompt, 6) == first
    assert graphed._graphs == captured  # replayed, never captured again
    assert (1, 12, False) not in graphed.graph_shapes  # a prefill longer than max_tokens runs eagerly


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")
def test_a_graph_captured_off_the_current_device_replays_its_own_work():
    hf = tiny_hf_model("llama")
    eager, graphed = _eager_and_graphed(hf, max_len=64, device="cuda:1")
    prompt = torch.randint(0, 97, (1, 40), generator=torch.Generator().manual_seed(5)).to("cuda:1")
    assert torch.cuda.current_device() == 0
    assert _greedy(graphed, prompt, 12) == _greedy(eager, prompt, 12)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_CUDA)
def test_every_native_draft_is_graphed_as_the_target_is(tmp_path):
    """The self-skip draft is a view of the target's layers: it must replay graphs too, or sd's
    comparison against the graphed target would pay eager launches for the draft alone."""
    from ssdbench.models.drafts import parse_draft
    from ssdbench.models.model_set import ModelSet, ModelSettings

    folder = save_tiny_model(tmp_path / "tiny")
    models = ModelSet(ModelSettings(target=str(folder), draft=parse_draft("self-skip:1"), device="cuda:0"))
    target, draft = models.target("native"), models.draft("native")
    assert isinstance(target, GraphedModel) and isinstance(draft, GraphedModel)
    assert len(draft.model.layers) == 1 and draft.model.layers[0] is target.model.layers[0]
    assert draft.model.static_shapes
