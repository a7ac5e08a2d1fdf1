"""`--engine hf`: the same round loop on transformers' own model code.

Each row keeps its own DynamicCache, cropped back to the row's start position before every
forward, so rejected drafts and padding are dropped exactly as the native cache overwrites
them. Rows run one after another: transformers' cache cannot hold rows of different lengths.
"""

from __future__ import annotations

import torch


class HfCausalLM:
    """Adapter giving a transformers causal LM the `CausalModel` interface of the loop."""

    def __init__(self, model) -> None:
        self.model = model.eval()
        self.vocab_size = int(model.config.vocab_size)
        self.device = next(model.parameters()).device
        self._caches: list = []
        self._cache_kwarg = _cache_argument_name(model)

    def allocate(self, batch_size: int, max_len: int) -> None:
        from transformers import DynamicCache

        self._caches = [DynamicCache(config=self.model.config) for _ in range(batch_size)]

    @torch.inference_mode()
    def forward(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """tokens, positions: [B, T] -> fp32 logits [B, T, V]."""
        rows = []
        for b, cache in enumerate(self._caches):
            start = int(positions[b, 0])
            excess = cache.get_seq_length() - start
            if excess > 0:  # drop rejected drafts and padding (transformers 5: crop takes a negative count)
                cache.crop(-excess)
            out = self.model(
                input_ids=tokens[b : b + 1], position_ids=positions[b : b + 1], use_cache=True, **{self._cache_kwarg: cache}
            )
            rows.append(out.logits[0].float())  # [T, V]
        return torch.stack(rows)  # [B, T, V]


def _cache_argument_name(model) -> str:
    """transformers 5.x renamed `past_key_values` to `cache`; use whichever this version takes."""
    import inspect

    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def load_hf_model(path, *, dtype: torch.dtype, device: str, trust_remote_code: bool = False):
    """transformers' model for a resolved local folder, with its SDPA attention."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, attn_implementation="sdpa",
                                                 trust_remote_code=trust_remote_code)
    return model.to(device).eval()


def quantize_hf_int8(model):
    """An int8 dynamically-quantised copy (nn.Linear layers), transformers' side of `self-int8`."""
    import copy

    from torch.ao.quantization import quantize_dynamic

    return quantize_dynamic(copy.deepcopy(model).float(), {torch.nn.Linear}, dtype=torch.qint8).eval()
