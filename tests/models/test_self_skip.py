"""The self-skip draft's model side: layers left out exactly, and a calibration that finds skippable layers."""

from __future__ import annotations

import json
import re

import pytest
import torch

from ssdbench.errors import UsageError
from ssdbench.models.build import build_native_model, build_random_model
from ssdbench.models.self_skip import choose_skipped_layers, parse_self_skip, predicted_speedup, skipping_view
from ssdbench.models.shape import ModelShape
from tiny_models import tiny_llama_config, tiny_state_dict

LAYERS = 8


def build(config, state, **kwargs):
    return build_native_model(config, state, linear_kernel="matmul", **kwargs)


def tiny(layers: int = LAYERS, seed: int = 0, **extra):
    config = tiny_llama_config(vocab=64, layers=layers, **extra)
    return config, tiny_state_dict(config, seed=seed)


def logits_of(model, tokens: torch.Tensor) -> torch.Tensor:  # tokens [B, T] -> [B, T, V]
    b, t = tokens.shape
    model.allocate(b, t)
    return model.forward(tokens, torch.arange(t).expand(b, t))


def tokens_of(seed: int, batch: int = 2, length: int = 12) -> torch.Tensor:
    return torch.randint(0, 64, (batch, length), generator=torch.Generator().manual_seed(seed))  # [B, T]


def without_layers(config, state, skip: tuple[int, ...]):
    """The checkpoint a model without `skip` would have: those layers deleted, the rest renumbered."""
    kept = [i for i in range(config.num_hidden_layers) if i not in skip]
    renumber = {old: new for new, old in enumerate(kept)}
    smaller = {}
    for name, tensor in state.items():
        match = re.match(r"model\.layers\.(\d+)\.(.*)", name)
        if match is None:
            smaller[name] = tensor
        elif int(match[1]) in renumber:
            smaller[f"model.layers.{renumber[int(match[1])]}.{match[2]}"] = tensor
    reduced = config.__class__.from_dict({**config.to_dict(), "num_hidden_layers": len(kept)})
    return reduced, smaller


def make_identities(state, layers) -> dict:
    """Zero o_proj and down_proj of `layers`: each then adds nothing to the residual stream."""
    state = dict(state)
    for i in layers:
        for name in ("self_attn.o_proj.weight", "mlp.down_proj.weight"):
            state[f"model.layers.{i}.{name}"] = torch.zeros_like(state[f"model.layers.{i}.{name}"])
    return state


def test_no_skipped_layers_is_bit_identical():
    config, state = tiny()
    tokens = tokens_of(1)
    plain = build(config, state)
    skipless = build(config, state, skip_layers=())
    assert torch.equal(logits_of(skipless, tokens), logits_of(plain, tokens))
    assert skipless.skipped_layers == () and "skipped_layers" not in skipless.describe()


@pytest.mark.parametrize("skip", [(0,), (2, 5), (1, 3, 4, 7)])
def test_skipping_equals_a_checkpoint_without_those_layers(skip):
    config, state = tiny(seed=2, tie=True)
    tokens = tokens_of(3)
    skipped = build(config, state, skip_layers=skip)
    want = logits_of(build(*without_layers(config, state, skip)), tokens)
    assert torch.equal(logits_of(skipped, tokens), want)
    assert not torch.allclose(logits_of(build(config, state), tokens), want)  # the layers did matter
    assert torch.equal(logits_of(skipping_view(build(config, state), skip), tokens), want)  # the calibration's view
    assert skipped.skipped_layers == tuple(sorted(skip))
    assert skipped.kernel_names()["skipped_layers"] == list(skip)


def test_skipping_in_the_middle_of_incremental_decoding_uses_only_kept_layers_cache():
    config, state = tiny(seed=4)
    skipped = build(config, state, skip_layers=(1, 6))
    skipped.allocate(1, 16)
    assert skipped.cache.k.shape[0] == LAYERS - 2 and skipped.cache.v.shape[0] == LAYERS - 2
    tokens = tokens_of(5, batch=1, length=10)
    steps = [skipped.forward(tokens[:, :6], torch.arange(6)[None])]
    steps += [skipped.forward(tokens[:, t : t + 1], torch.tensor([[t]])) for t in range(6, 10)]
    want = logits_of(build(*without_layers(config, state, (1, 6))), tokens)
    torch.testing.assert_close(torch.cat(steps, dim=1), want, atol=1e-5, rtol=1e-5)


def test_weight_bytes_drop_by_the_skipped_layers():
    config, state = tiny()
    full, skipped = build(config, state), build(config, state, skip_layers=(2, 3, 5))
    one_layer = sum(t.numel() * t.element_size() for n, t in state.items() if n.startswith("model.layers.0."))
    assert full.weight_bytes_per_forward() - skipped.weight_bytes_per_forward() == 3 * one_layer
    assert skipped.describe()["weight_bytes_per_forward"] == skipped.weight_bytes_per_forward()


def test_random_model_skipping_keeps_the_full_models_weights():
    shape = ModelShape(4, 32, 4, 2, 8, 64, 50, True, has_qk_norm=True, has_qkv_bias=True, max_position=64)
    full = build_random_model(shape, seed=3, linear_kernel="matmul")
    skipped = build_random_model(shape, seed=3, linear_kernel="matmul", skip_layers=(1, 2))
    tokens = torch.tensor([[1, 2, 3, 4]])
    assert torch.equal(logits_of(skipped, tokens), logits_of(skipping_view(full, (1, 2)), tokens))
    layer_bytes = shape.weight_bytes_per_forward(torch.float32) - ModelShape(
        3, 32, 4, 2, 8, 64, 50, True, has_qk_norm=True, has_qkv_bias=True).weight_bytes_per_forward(torch.float32)
    assert full.weight_bytes_per_forward() - skipped.weight_bytes_per_forward() == 2 * layer_bytes


@pytest.mark.parametrize("skip, message", [
    ((8,), "cannot skip layer 8: the model has 8 layers, 0..7"),
    ((-1,), "cannot skip layer -1"),
    ((2, 4, 2), "layer 2 is named twice"),
    (tuple(range(LAYERS)), "cannot skip all 8 layers"),
])
def test_bad_skip_sets_are_refused(skip, message):
    config, state = tiny()
    with pytest.raises(UsageError, match=re.escape(message)) as err:
        build(config, state, skip_layers=skip)
    assert "\n" not in str(err.value)
    with pytest.raises(UsageError, match=re.escape(message)):
        skipping_view(build(config, state), skip)


@pytest.mark.parametrize("spec, want", [
    ("self-skip", "auto"), ("self-skip:auto", "auto"), (" self-skip: auto ", "auto"),
    ("self-skip:3,5,7", (3, 5, 7)), ("self-skip:7, 3", (3, 7)), ("self-skip:0", (0,)),
])
def test_parse_self_skip(spec, want):
    assert parse_self_skip(spec) == want


@pytest.mark.parametrize("spec, message", [
    ("self-int8", "not a self-skip draft"), ("selfskip:3", "not a self-skip draft"),
    ("self-skip:", "bad layer list"), ("self-skip:3,,5", "bad layer list"), ("self-skip:-1", "bad layer list"),
    ("self-skip:x", "bad layer list"), ("self-skip:1.5", "bad layer list"), ("self-skip:3,3", "named twice"),
])
def test_parse_errors_are_one_line(spec, message):
    with pytest.raises(UsageError, match=message) as err:
        parse_self_skip(spec)
    assert "\n" not in str(err.value)


def test_predicted_speedup():
    assert predicted_speedup(1.0, 0.5, 4) == pytest.approx(5 / 3)
    assert predicted_speedup(0.0, 0.5, 4) == pytest.approx(1 / 3)
    assert predicted_speedup(0.5, 0.25, 3) == pytest.approx((1 - 0.5**4) / 0.5 / 1.75)


def test_calibration_finds_identity_layers():
    config, state = tiny(seed=6, initializer_range=0.1)
    identities = (2, 5)
    target = build(config, make_identities(state, identities))
    prompts = [torch.randint(0, 64, (n,), generator=torch.Generator().manual_seed(n)).tolist() for n in (30, 17, 40)]
    choice = choose_skipped_layers(target, prompts, k=4)
    ranked = sorted(range(1, LAYERS - 1), key=lambda i: -choice.layer_scores[i])
    assert set(ranked[:2]) == set(identities)
    assert set(identities) <= set(choice.layers) and choice.alpha == 1.0
    assert choice.layers == identities  # skipping a third, working layer costs agreement
    assert all(c.alpha < 1.0 for c in choice.candidates if len(c.layers) > 2)
    assert [len(c.layers) for c in choice.candidates] == [1, 2, 3, 4]
    assert all(0 not in c.layers and LAYERS - 1 not in c.layers for c in choice.candidates)
    assert choice.tokens == 87 and choice.cost_ratio == pytest.approx(
        build(config, state, skip_layers=identities).weight_bytes_per_forward() / target.weight_bytes_per_forward())
    record = json.loads(json.dumps(choice.to_dict()))
    assert record["layers"] == [2, 5] and len(record["candidates"]) == 4 and len(record["layer_scores"]) == LAYERS
    assert target.cache is None  # calibration ran in views with caches of their own


def test_layer_scores_are_cosines_of_transformers_hidden_states():
    from transformers import LlamaForCausalLM

    config, state = tiny(seed=7, initializer_range=0.1)
    hf = LlamaForCausalLM(config).eval()
    hf.load_state_dict(state, strict=False)
    prompts = [[3, 9, 27, 17, 51, 25, 11, 33], [5, 1, 60, 2]]
    choice = choose_skipped_layers(build(config, state), prompts, k=3)
    with torch.inference_mode():
        hidden = [hf(torch.tensor([p]), output_hidden_states=True).hidden_states for p in prompts]  # L+1 of [1, T, h]
    # hidden_states[-1] has the final norm applied, so the last layer's output is not there to compare
    for i in range(LAYERS - 1):
        cosines = torch.cat([torch.cosine_similarity(h[i], h[i + 1], dim=-1)[0] for h in hidden])  # [positions]
        assert choice.layer_scores[i] == pytest.approx(float(cosines.mean()), abs=1e-5), i


def test_calibration_caps_tokens_and_refuses_what_it_cannot_use():
    config, state = tiny(layers=4)
    target = build(config, state)
    choice = choose_skipped_layers(target, [list(range(40)), list(range(40))], k=2, max_tokens=50)
    assert choice.tokens == 50 and [len(c.layers) for c in choice.candidates] == [1, 2]
    with pytest.raises(UsageError, match="at least one non-empty prompt"):
        choose_skipped_layers(target, [[]], k=2)
    with pytest.raises(UsageError, match="at least 3 layers"):
        choose_skipped_layers(build(*tiny(layers=2)), [[1, 2, 3]], k=2)
