"""Model folders and files a user might point at: code they ship, damaged weights, bad paths, absent devices.

Every case goes through the real CLI (`run` or `validate`): one line, exit 2, nothing loaded,
no run directory left behind, and never a question on stdin.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from cli_checks import assert_one_line_error
from cli_fixtures import save_tiny_model
from typer.testing import CliRunner

from ssdbench.cli.main import app

runner = CliRunner()

CUSTOM_CONFIG = '''
from pathlib import Path
from transformers import LlamaConfig

Path({marker!r}).write_text("the folder's code ran")


class CustomConfig(LlamaConfig):
    model_type = "llama"
'''


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return save_tiny_model(tmp_path_factory.mktemp("models") / "tiny", vocab=64, seed=0)


def copy_model(tiny: Path, dest: Path) -> Path:
    shutil.copytree(tiny, dest)
    return dest


def run(target: Path | str, out: Path, *extra: str, stdin: str | None = None):
    args = ["run", "--target", str(target), "--suite", "smoke", "--num-prompts", "1", "--max-new-tokens", "3",
            "--no-chat-template", "--methods", "ar", "--out", str(out), *extra]
    return runner.invoke(app, args, input=stdin)


def validate(target: Path | str, *extra: str):
    return runner.invoke(app, ["validate", "--target", str(target), "--draft", "ngram", *extra])


def with_auto_map(tiny: Path, dest: Path) -> tuple[Path, Path]:
    """A copy of the tiny model whose config.json maps AutoConfig to a module in the folder."""
    folder = copy_model(tiny, dest)
    marker = dest.parent / f"{dest.name}-code-ran"
    (folder / "custom_config.py").write_text(CUSTOM_CONFIG.format(marker=str(marker)))
    config = json.loads((folder / "config.json").read_text())
    config["auto_map"] = {"AutoConfig": "custom_config.CustomConfig"}
    (folder / "config.json").write_text(json.dumps(config))
    return folder, marker


# --- item 5: a folder's own code ------------------------------------------------------------


def test_auto_map_folder_is_refused_without_reading_stdin(tiny, tmp_path):
    folder, marker = with_auto_map(tiny, tmp_path / "custom")
    result = run(folder, tmp_path / "run", stdin="y\ny\ny\n")  # an answer waiting, should anything ask
    assert_one_line_error(result, "auto_map", "--trust-remote-code", str(folder))
    assert "[y/N]" not in result.output and not marker.exists()
    assert not (tmp_path / "run").exists()
    assert_one_line_error(validate(folder), "auto_map", "--trust-remote-code")
    assert not marker.exists()


def test_auto_map_in_the_tokenizer_config_is_refused_too(tiny, tmp_path):
    folder = copy_model(tiny, tmp_path / "custom-tok")
    tok_config = json.loads((folder / "tokenizer_config.json").read_text())
    tok_config["auto_map"] = {"AutoTokenizer": ["custom_tok.Tok", None]}
    (folder / "tokenizer_config.json").write_text(json.dumps(tok_config))
    assert_one_line_error(run(folder, tmp_path / "run"), "tokenizer_config.json", "--trust-remote-code")


def test_trust_remote_code_runs_the_folders_code_and_is_recorded(tiny, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_MODULES_CACHE", str(tmp_path / "modules"))
    folder, marker = with_auto_map(tiny, tmp_path / "custom")
    result = run(folder, tmp_path / "run", "--trust-remote-code")
    assert result.exit_code == 0, result.output
    assert marker.exists()  # the opt-in really lets transformers use the folder's code
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["config"]["trust_remote_code"] is True


def test_an_ordinary_run_records_that_no_code_was_trusted(tiny, tmp_path):
    assert run(tiny, tmp_path / "run").exit_code == 0
    assert json.loads((tmp_path / "run" / "manifest.json").read_text())["config"]["trust_remote_code"] is False


# --- item 6: damaged weights ------------------------------------------------------------------


def truncate(file: Path, keep: int) -> None:
    file.write_bytes(file.read_bytes()[:keep])


@pytest.mark.parametrize("damage, fragment", [
    (lambda f: truncate(f, f.stat().st_size - 100), "truncated"),  # a download cut short
    (lambda f: truncate(f, 4), "not a safetensors file"),
    (lambda f: f.write_bytes(os.urandom(4096)), "safetensors"),  # random bytes under the right name
    (lambda f: f.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all"), "unreadable safetensors header"),
])
def test_damaged_safetensors_are_refused_by_run_and_validate(tiny, tmp_path, damage, fragment):
    folder = copy_model(tiny, tmp_path / "damaged")
    damage(folder / "model.safetensors")
    assert_one_line_error(run(folder, tmp_path / "run"), "model.safetensors", fragment)
    assert not (tmp_path / "run").exists()
    assert_one_line_error(validate(folder), "model.safetensors", fragment)


def rewrite_header(file: Path, edit) -> None:
    """Edit a safetensors header in place, keeping the data bytes (shapes then disagree with them or the config)."""
    raw = file.read_bytes()
    size = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + size])
    edit(header)
    text = json.dumps(header).encode()
    file.write_bytes(len(text).to_bytes(8, "little") + text + raw[8 + size:])


def test_validate_checks_tensor_names_shapes_and_sizes_against_the_config(tiny, tmp_path):
    assert validate(tiny).exit_code == 0
    wrong_config = copy_model(tiny, tmp_path / "wrong-config")
    config = json.loads((wrong_config / "config.json").read_text())
    (wrong_config / "config.json").write_text(json.dumps({**config, "intermediate_size": 96}))
    assert_one_line_error(validate(wrong_config), "mlp.gate_proj.weight", "[64, 32]", "[96, 32]")
    assert_one_line_error(run(wrong_config, tmp_path / "run"), "mlp.gate_proj.weight")
    assert not (tmp_path / "run").exists()

    renamed = copy_model(tiny, tmp_path / "renamed")
    rewrite_header(renamed / "model.safetensors",
                   lambda h: h.__setitem__("model.norm.scale", h.pop("model.norm.weight")))
    assert_one_line_error(validate(renamed), "lack", "model.norm.weight")

    misshapen = copy_model(tiny, tmp_path / "misshapen")
    rewrite_header(misshapen / "model.safetensors",
                   lambda h: h["model.norm.weight"].__setitem__("shape", [64]))  # 32 floats of data, 64 claimed
    assert_one_line_error(validate(misshapen), "model.norm.weight", "needs 256 bytes", "128")


def test_a_gguf_that_is_not_one(tmp_path, monkeypatch):
    monkeypatch.setenv("SSDBENCH_CACHE_DIR", str(tmp_path / "cache"))
    fake = tmp_path / "model.gguf"
    fake.write_bytes(os.urandom(2048))
    assert_one_line_error(run(fake, tmp_path / "run"), "not a GGUF file")
    assert_one_line_error(validate(fake), "not a GGUF file")
    fake.write_bytes(b"")
    assert_one_line_error(validate(fake), "not a GGUF file")
    assert not (tmp_path / "run").exists()


def test_a_truncated_gguf(tmp_path, monkeypatch):
    from ssdbench.models.checkpoint.embedded import embedded_gguf_path

    monkeypatch.setenv("SSDBENCH_CACHE_DIR", str(tmp_path / "cache"))
    with open(embedded_gguf_path(), "rb") as f:
        head = f.read(1 << 20)  # the magic and header are real; the tensors are cut off
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(head)
    assert_one_line_error(validate(cut), "cut.gguf", "GGUF")
    assert not list((tmp_path / "cache" / "models").glob("cut*"))  # no half-converted folder left behind


# --- item 6: paths and devices ----------------------------------------------------------------


def test_symlink_loops_are_named(tiny, tmp_path):
    loop = tmp_path / "loop"
    loop.symlink_to(tmp_path / "loop")
    assert_one_line_error(run(loop, tmp_path / "run"), str(loop), "symlink loop")
    assert_one_line_error(validate(loop), "symlink loop")
    gguf_loop = tmp_path / "loop.gguf"
    gguf_loop.symlink_to(tmp_path / "loop.gguf")
    assert_one_line_error(validate(gguf_loop), "symlink loop")
    suite_loop = tmp_path / "prompts.jsonl"
    suite_loop.symlink_to(tmp_path / "prompts.jsonl")
    result = runner.invoke(app, ["run", "--target", str(tiny), "--suite", str(suite_loop), "--out", str(tmp_path / "r")])
    assert_one_line_error(result, "prompts.jsonl", "symlink loop")
    assert not (tmp_path / "run").exists() and not (tmp_path / "r").exists()


@pytest.mark.parametrize("flag, value, fragment", [
    ("--device", "cuda:7", "cuda:7"),
    ("--device", "tpu", "tpu"),
    ("--device", "mps", "cpu or cuda"),
    ("--device", "", "not a device name"),
    ("--target-device", "cuda:7", "--target-device"),
    ("--target-device", "tpu", "--target-device"),
    ("--draft-device", "cuda:9", "--draft-device"),
])
def test_devices_that_are_not_here(tiny, tmp_path, flag, value, fragment):
    import torch

    if value.startswith("cuda") and torch.cuda.device_count() > int(value.split(":")[1]):
        pytest.skip(f"{value} exists on this machine")
    assert_one_line_error(run(tiny, tmp_path / "run", flag, value), fragment)
    assert not (tmp_path / "run").exists()


def test_validate_refuses_devices_that_are_not_here(tiny):
    assert_one_line_error(validate(tiny, "--device", "tpu"), "tpu")
