"""Tensor-parallel target (models/tensor_parallel.py): `--tp 2` over gloo on CPU gives the logits of
`--tp 1` (fp32 tolerance) and the same greedy outputs, through ranks ssdbench starts itself."""

import pytest
import torch

from ssdbench.errors import UsageError
from ssdbench.models.build import build_native_model
from ssdbench.models.shape import ModelShape
from ssdbench.models.recipe import ModelRecipe
from ssdbench.models.tensor_parallel import ShardRecipe, launch, shard_lookup
from ssdbench.models.checkpoint.weights import load_config, load_state_dict
from ssdbench.models.checkpoint.source import resolve_model
from tests.cli_fixtures import save_tiny_model


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory):
    return save_tiny_model(tmp_path_factory.mktemp("tp") / "tiny", vocab=64, seed=3)


def _reference(folder):
    source = resolve_model(str(folder))
    model = build_native_model(load_config(source), load_state_dict(source, dtype=torch.float32), linear_kernel="matmul")
    model.allocate(1, 64)
    return model


def test_shards_put_together_are_the_full_projections(tiny_folder):
    source = resolve_model(str(tiny_folder))
    shape = ModelShape.from_hf_config(load_config(source))
    state = load_state_dict(source, dtype=torch.float32)
    parts = [shard_lookup(shape, state.get, rank=r, tp=2) for r in range(2)]
    for name in ("model.layers.0.self_attn.q_proj.weight", "model.layers.1.mlp.up_proj.weight"):
        torch.testing.assert_close(torch.cat([p(name) for p in parts], dim=0), state[name], rtol=0, atol=0)
    for name in ("model.layers.0.self_attn.o_proj.weight", "model.layers.1.mlp.down_proj.weight"):
        torch.testing.assert_close(torch.cat([p(name) for p in parts], dim=1), state[name], rtol=0, atol=0)
    assert parts[1]("model.embed_tokens.weight") is state["model.embed_tokens.weight"]  # replicated
    local = shape.tensor_parallel_shard(2)
    assert (local.num_heads, local.num_kv_heads, local.intermediate) == (2, 1, 32)


def test_a_tp_that_does_not_divide_the_heads_is_one_line(tiny_folder):
    shape = ModelShape.from_hf_config(load_config(resolve_model(str(tiny_folder))))
    with pytest.raises(UsageError, match="--tp 3 does not divide the target's 4 attention heads"):
        shape.tensor_parallel_shard(3)


def test_tp2_over_gloo_gives_tp1_logits_and_greedy_tokens(tiny_folder):
    reference = _reference(tiny_folder)
    model = launch(ShardRecipe(ModelRecipe(model_path=str(tiny_folder), linear_kernel="matmul"), threads=1), tp=2)
    try:
        model.allocate(1, 64)
        prompt = torch.tensor([[5, 9, 2, 33, 17, 8]])  # [1, T]
        positions = torch.arange(prompt.shape[1])[None]
        want, got = reference(prompt, positions), model(prompt, positions)  # [1, T, V]
        assert got.shape == want.shape
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        ref_tokens, tp_tokens = [], []
        for tokens, m in ((ref_tokens, reference), (tp_tokens, model)):
            nxt = m(prompt, positions)[:, -1].argmax(-1, keepdim=True)  # [1, 1]
            for step in range(12):
                tokens.append(int(nxt))
                pos = torch.tensor([[prompt.shape[1] + step]])
                nxt = m(nxt, pos)[:, -1].argmax(-1, keepdim=True)
        assert tp_tokens == ref_tokens
        verify = torch.tensor([[4, 7, 1, 30]])  # a K+1-token verify with a tree-style explicit mask
        slots = torch.arange(6, 10)[None]
        mask = torch.ones(1, 4, 64, dtype=torch.bool).tril(diagonal=6)
        torch.testing.assert_close(model(verify, slots, attn_mask=mask), reference(verify, slots, attn_mask=mask),
                                   rtol=1e-5, atol=1e-5)
        assert model.describe()["tensor_parallel"] == 2 and model.shape.num_heads == 4
    finally:
        model.close()
    assert not any(p.is_alive() for p in model._processes)


def _run(folder, out, *extra):
    from typer.testing import CliRunner

    from ssdbench.cli.main import app

    return CliRunner().invoke(app, ["run", "--target", str(folder), "--suite", "smoke", "--num-prompts", "2",
                                    "--max-new-tokens", "8", "--ignore-eos", "--threads", "1", "--out", str(out),
                                    *extra])


def _outputs(out) -> dict:
    import pyarrow.parquet as pq

    requests = pq.read_table(out / "requests.parquet").to_pandas()
    return {m: [list(o) for o in g.sort_values("request_idx")["output_token_ids"]] for m, g in requests.groupby("method")}


def test_a_tp2_run_decodes_what_a_tp1_run_does_and_records_the_split(tiny_folder, tmp_path):
    import json

    one = _run(tiny_folder, tmp_path / "tp1", "--methods", "ar,sd,ssd")
    two = _run(tiny_folder, tmp_path / "tp2", "--methods", "ar,sd,ssd", "--tp", "2")
    assert one.exit_code == 0, one.output
    assert two.exit_code == 0, two.output
    outputs = _outputs(tmp_path / "tp2")
    assert outputs == _outputs(tmp_path / "tp1")
    assert outputs["ar"] == outputs["sd"] == outputs["ssd"]
    manifest = json.loads((tmp_path / "tp2" / "manifest.json").read_text())
    assert manifest["config"]["tp"] == 2
    assert manifest["kernels"]["target"]["tensor_parallel"] == 2


@pytest.mark.parametrize("extra,fragments", [
    (("--tp", "3"), ("--tp 3 does not divide", "4 attention heads")),
    (("--tp", "0"), ("--tp must be a positive integer",)),
    (("--tp", "2", "--methods", "ar,hf-generate"), ("--tp", "hf-generate", "drop it")),
    (("--tp", "2", "--engine", "native,hf"), ("--tp", "--engine native")),
    (("--tp", "2", "--draft", "self-skip:0"), ("--tp", "self-skip")),
    (("--tp", "2", "--dtype", "float16"), ("--tp 2 splits float32 or bfloat16 weights, not --dtype float16",)),
])
def test_what_tp_cannot_do_is_one_line(tiny_folder, tmp_path, extra, fragments):
    from cli_checks import assert_one_line_error

    assert_one_line_error(_run(tiny_folder, tmp_path / "run", *extra), *fragments)
    assert not (tmp_path / "run").exists()


def test_the_lazy_lookup_gives_the_state_dict_one_tensor_at_a_time(tiny_folder):
    from ssdbench.models.checkpoint.weights import lazy_state_lookup

    source = resolve_model(str(tiny_folder))
    state = load_state_dict(source, dtype=torch.float32)
    lookup = lazy_state_lookup(source, dtype=torch.float32)
    for name, tensor in state.items():
        assert torch.equal(lookup(name), tensor)
    assert lookup("model.layers.9.mlp.up_proj.weight") is None
