"""Attention backends: the sdpa reference against the textbook formula; the registry's errors."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from ssdbench.errors import UsageError
from ssdbench.kernels.registry import get_backend, list_backends
from ssdbench.kernels.sdpa import folded_gqa_attention, naive_attention


def random_case(*, b=2, h=4, hkv=2, t=3, s=9, d=8, seed=0, causal=False):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(b, h, t, d, generator=gen)  # [B, H, T, D]
    k = torch.randn(b, hkv, s, d, generator=gen)  # [B, Hkv, S, D]
    v = torch.randn(b, hkv, s, d, generator=gen)  # [B, Hkv, S, D]
    if causal:  # the last T slots are this step's queries
        mask = torch.arange(s) <= torch.arange(s - t, s)[:, None]  # [T, S]
        mask = mask.expand(b, 1, t, s)  # [B, 1, T, S]
    else:
        mask = torch.rand(b, 1, t, s, generator=gen) < 0.6  # [B, 1, T, S]
        mask[..., 0] = True  # every query sees at least one slot
    return q, k, v, mask


@pytest.mark.parametrize("h,hkv,t", [(4, 2, 3), (4, 4, 1), (6, 2, 5), (3, 1, 1)])
def test_sdpa_matches_naive_attention(h, hkv, t):
    q, k, v, mask = random_case(h=h, hkv=hkv, t=t)
    got = get_backend("sdpa").attend(q, k, v, mask, scale=0.3)
    want = naive_attention(q, k, v, mask, scale=0.3)
    assert got.shape == q.shape
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("h,hkv,t", [(4, 2, 3), (6, 2, 5), (3, 1, 1), (8, 2, 1)])
def test_folded_gqa_matches_naive_attention(h, hkv, t):
    """The CUDA masked path's folding of query groups, checked here on CPU, strided queries included."""
    q, k, v, mask = random_case(h=h, hkv=hkv, t=t, s=11)
    q_strided = q.transpose(1, 2).contiguous().transpose(1, 2)  # [B, H, T, D], as the model passes it
    got = folded_gqa_attention(q_strided, k, v, mask, scale=0.3)
    torch.testing.assert_close(got, naive_attention(q, k, v, mask, scale=0.3), atol=1e-5, rtol=1e-5)


def test_folded_gqa_takes_the_transposed_output_cudas_masked_kernel_returns(monkeypatch):
    """CUDA's memory-efficient kernel (the one that takes a mask) writes [B, T, H, D] and returns it
    transposed; the fold must not assume a contiguous output. The same layout, given here on CPU."""
    import torch.nn.functional as F

    sdpa = F.scaled_dot_product_attention
    monkeypatch.setattr(F, "scaled_dot_product_attention",
                        lambda *a, **kw: sdpa(*a, **kw).transpose(1, 2).contiguous().transpose(1, 2))
    q, k, v, mask = random_case(h=6, hkv=2, t=3, s=11)
    got = folded_gqa_attention(q, k, v, mask, scale=0.3)
    torch.testing.assert_close(got, naive_attention(q, k, v, mask, scale=0.3), atol=1e-5, rtol=1e-5)


def test_sdpa_accepts_non_contiguous_queries():
    q, k, v, mask = random_case(t=2)
    q_strided = q.transpose(1, 2).contiguous().transpose(1, 2)  # [B, H, T, D] with T-major storage
    got = get_backend("sdpa").attend(q_strided, k, v, mask, scale=0.5)
    torch.testing.assert_close(got, naive_attention(q, k, v, mask, scale=0.5), atol=1e-5, rtol=1e-5)


def test_default_backend_is_sdpa_and_supports_trees():
    backend = get_backend()
    assert backend.name == "sdpa" and backend.supports_tree_masks


@pytest.mark.parametrize("typo,suggestion", [("spda", "sdpa"), ("flsh", "flash"), ("SDPA ", None)])
def test_unknown_backend_suggests_close_names(typo, suggestion):
    if suggestion is None:  # case and spaces are forgiven
        assert get_backend(typo).name == "sdpa"
        return
    with pytest.raises(UsageError, match=f"did you mean '{suggestion}'"):
        get_backend(typo)


def test_unknown_backend_far_from_all_lists_known():
    with pytest.raises(UsageError, match="known: sdpa, flash"):
        get_backend("xformers-triton")


def test_flash_on_cpu_is_a_clear_usage_error():
    with pytest.raises(UsageError, match="'flash' is unavailable: flash-attn"):
        get_backend("flash", device="cpu")
    rows = {name: (ok, why) for name, ok, why in list_backends(device="cpu")}
    assert rows["sdpa"] == (True, "")
    assert rows["flash"][0] is False and "flash-attn" in rows["flash"][1]


def test_the_kernels_live_at_the_top_and_nothing_of_ours_shadows_hugging_faces_kernels():
    """The kernels are the top-level `kernels/` folder, imported as `ssdbench.kernels`. Tests put the
    repository root on sys.path, and transformers (>= 5.25 requires HF's `kernels`) imports `kernels`:
    with an `__init__.py` our folder would be what that import finds; without one, it never is."""
    import subprocess
    import sys
    from pathlib import Path

    import ssdbench.kernels.gemv

    repo = Path(__file__).resolve().parents[2]
    assert Path(ssdbench.kernels.gemv.__file__).resolve().parent == repo / "kernels"
    assert not (repo / "kernels" / "__init__.py").exists()
    found = subprocess.run([sys.executable, "-c", "import importlib.util as u; s = u.find_spec('kernels'); "
                            "print(s and s.origin)"], cwd=repo, capture_output=True, text=True, check=True)
    origin = found.stdout.strip()  # run from the root, first on sys.path: HF's (site-packages), or none
    assert origin == "None" or Path(origin).resolve().parent.parent != repo, origin


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-4), (torch.bfloat16, 2e-2)])
def test_sdpa_on_cuda_matches_cpu(dtype, tol):
    q, k, v, mask = random_case(t=4, s=33, d=64)  # grouped queries under a tree-like mask: the folded path
    got = get_backend("sdpa", device="cuda").attend(q.cuda().to(dtype), k.cuda().to(dtype), v.cuda().to(dtype),
                                                    mask.cuda(), scale=0.25)
    want = naive_attention(q.to(dtype).float(), k.to(dtype).float(), v.to(dtype).float(), mask, scale=0.25)
    torch.testing.assert_close(got.float().cpu(), want, atol=tol, rtol=tol)


@pytest.mark.gpu
@pytest.mark.skipif(importlib.util.find_spec("flash_attn") is None or not torch.cuda.is_available(),
                    reason="needs flash-attn and a CUDA device")
def test_flash_matches_sdpa_on_causal_chains():
    q, k, v, mask = random_case(b=2, h=8, hkv=2, t=3, s=40, d=64, causal=True)
    args = [x.cuda().bfloat16() for x in (q, k, v)]
    got = get_backend("flash", device="cuda").attend(*args, mask.cuda(), scale=0.125)
    want = get_backend("sdpa").attend(*args, mask.cuda(), scale=0.125)
    torch.testing.assert_close(got.float(), want.float(), atol=2e-2, rtol=2e-2)
