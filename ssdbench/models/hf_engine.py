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
        self._cache_kwarg = cache_argument_name(model)

    def allocate(self, batch_size: int, max_len: int) -> None:
        from transformers import DynamicCache

        self._caches = [DynamicCache(config=self.model.config) for _ in range(batch_size)]

    @torch.inference_mode()
    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, *, return_hidden: bool = False):
        """tokens, positions: [B, T] -> fp32 logits [B, T, V]; or (logits, hidden [B, T, H]) with return_hidden,
        the last of transformers' hidden states (after the final norm, what the lm_head reads)."""
        rows, hidden = [], []
        for b, cache in enumerate(self._caches):
            start = int(positions[b, 0])
            excess = cache.get_seq_length() - start
            if excess > 0:  # drop rejected drafts and padding (transformers 5: crop takes a negative count)
                cache.crop(-excess)
            out = self.model(
                input_ids=tokens[b : b + 1], position_ids=positions[b : b + 1], use_cache=True,
                output_hidden_states=return_hidden, **{self._cache_kwarg: cache}
            )
            rows.append(out.logits[0].float())  # [T, V]
            if return_hidden:
                hidden.append(out.hidden_states[-1][0])  # [T, H]
        logits = torch.stack(rows)  # [B, T, V]
        return (logits, torch.stack(hidden)) if return_hidden else logits


def cache_argument_name(model) -> str:
    """transformers 5.x renamed `past_key_values` to `cache`; use whichever this version takes."""
    import inspect

    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def load_hf_model(path, *, dtype: torch.dtype, device: str, trust_remote_code: bool = False):
    """transformers' model for a resolved local folder, with its SDPA attention."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, attn_implementation="sdpa",
                                                 trust_remote_code=trust_remote_code)
    return model.to(device).eval()


class Int8LinearModule(torch.nn.Module):
    """An nn.Linear's place in a transformers model, computed by the native int8 draft's own linear."""

    def __init__(self, linear: torch.nn.Linear, choice) -> None:
        from ssdbench.models.int8.select import make_int8_linear

        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.impl = make_int8_linear(linear.weight.detach().float(), None if linear.bias is None else
                                     linear.bias.detach().float(), device=linear.weight.device, choice=choice)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [..., in] -> [..., out]
        return self.impl(x)


def int8_weight_only_copy(model, choice):
    """transformers' side of `self-int8`: a copy whose every nn.Linear (lm_head included) is the
    same weight-only int8 linear as the native draft's: same quantised weights, and the kernel(s)
    `choice` (models/int8/select.py's select_int8_kernel) names, which the native draft gets too."""
    import copy

    model = copy.deepcopy(model)  # norms and attention stay in the run's dtype, as in the native draft
    linears = [(name, m) for name, m in model.named_modules() if isinstance(m, torch.nn.Linear)]
    for name, linear in linears:
        parent_name, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent_name) if parent_name else model, child, Int8LinearModule(linear, choice))
    return model.eval()
