"""--random-weights: published shapes with random weights, for timing real shapes without a checkpoint."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
from cli_checks import assert_one_line_error
from typer.testing import CliRunner

from ssdbench.cli.main import app
from ssdbench.models.model_set import ModelSet
from ssdbench.models.shape import known_shape
from ssdbench.run.plan import build_plan
from ssdbench.run.settings import RunSettings

runner = CliRunner()

# from the models' published config.json files (Hugging Face): layers, hidden, heads, kv heads, intermediate, vocab
PUBLISHED = {
    "llama-3.1-70b": (80, 8192, 64, 8, 28672, 128256),
    "llama-3.1-8b": (32, 4096, 32, 8, 14336, 128256),
    "llama-3.2-1b": (16, 2048, 32, 8, 8192, 128256),
    "qwen3-32b": (64, 5120, 64, 8, 25600, 151936),
    "qwen3-0.6b": (28, 1024, 16, 8, 3072, 151936),
}


@pytest.mark.parametrize("name", list(PUBLISHED))
def test_random_weight_shapes_are_the_published_ones(name):
    s = known_shape(name)
    assert (s.num_layers, s.hidden, s.num_heads, s.num_kv_heads, s.intermediate, s.vocab) == PUBLISHED[name]


def test_the_target_and_the_ssd_draft_process_draw_the_same_weights():
    import torch

    from ssdbench.models.recipe import ModelRecipe
    from ssdbench.speculation.server import DraftSpec, _build_draft
    from ssdbench.speculation.fan_out import build_fan_out

    plan = build_plan(RunSettings(target="smollm2-135m", random_weights=True, seed=5))
    models = ModelSet(plan.models)
    target = models.target("native")
    recipe = ModelRecipe(random_shape="smollm2-135m", random_seed=5, linear_kernel="matmul")
    spec = DraftSpec(recipe=recipe, cores=None, k=2, backup="jit", saguaro_c=1.0, seed=0,
                     fan_out=build_fan_out("1", k=2, fan_out_list=None, miss_list=None))
    draft = _build_draft(spec)
    tokens, positions = torch.tensor([[5, 9, 200, 31]]), torch.arange(4)[None]
    for model in (target, draft):
        model.allocate(1, 8)
    assert torch.allclose(target.forward(tokens, positions), draft.forward(tokens, positions), atol=1e-5)


def test_a_random_weight_run_is_exact_and_says_so(tmp_path):
    out = tmp_path / "run"
    result = runner.invoke(app, ["run", "--target", "smollm2-135m", "--random-weights", "--suite", "smoke",
                                 "--num-prompts", "2", "--max-new-tokens", "6", "--methods", "ar,sd,ssd",
                                 "--threads", "1", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "random weights" in result.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["config"]["random_weights"] is True
    assert "random weights" in manifest["models"]["target"]["origin"]
    assert "random weights" in manifest["model_hashes"]["target"]
    requests = pq.read_table(out / "requests.parquet").to_pandas()
    assert (requests["new_tokens"] == 6).all()  # random weights follow no EOS
    by_method = {m: [list(o) for o in g.sort_values("request_idx")["output_token_ids"]]
                 for m, g in requests.groupby("method")}
    assert by_method["sd"] == by_method["ar"] == by_method["ssd"]


@pytest.mark.parametrize("extra,fragments", [
    (("--target", "tiny-llama"), ("--random-weights", "published shape", "llama-3.1-8b")),
    (("--methods", "ar,hf-generate"), ("native models only", "hf-generate")),
    (("--engine", "native,hf"), ("native models only", "--engine native")),
    (("--draft", "qwen3-0.6b"), ("different vocabularies",)),
])
def test_what_random_weights_cannot_do_is_one_line(tmp_path, extra, fragments):
    args = ["run", "--random-weights", "--suite", "smoke", "--num-prompts", "1", "--out", str(tmp_path / "run"), *extra]
    if "--target" not in extra:
        args += ["--target", "llama-3.2-1b"]
    assert_one_line_error(runner.invoke(app, args), *fragments)
    assert not (tmp_path / "run").exists()


def test_random_weights_take_the_tokenizer_alone_from_a_folder(tmp_path, monkeypatch):
    """A GPU machine without the 89 MiB model package tokenises with the tokenizer files alone."""
    import shutil

    from ssdbench.models.checkpoint.embedded import converted_folder, embedded_gguf_path
    from ssdbench.models.checkpoint.random_weights import TOKENIZER_ENV, random_weights_tokenizer

    embedded = converted_folder(embedded_gguf_path())
    folder = tmp_path / "tokenizer"
    folder.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(embedded / name, folder / name)
    monkeypatch.setenv(TOKENIZER_ENV, str(folder))
    text = "def add(a, b):\n    return a + b"
    monkeypatch.delenv(TOKENIZER_ENV)
    want = random_weights_tokenizer()(text)["input_ids"]
    monkeypatch.setenv(TOKENIZER_ENV, str(folder))
    assert random_weights_tokenizer()(text)["input_ids"] == want
    monkeypatch.setenv(TOKENIZER_ENV, str(tmp_path / "absent"))
    result = runner.invoke(app, ["run", "--target", "smollm2-135m", "--random-weights", "--suite", "smoke",
                                 "--num-prompts", "1", "--out", str(tmp_path / "run")])
    assert_one_line_error(result, TOKENIZER_ENV, "not a folder")
