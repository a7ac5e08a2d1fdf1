"""A timing-study target: SmolLM2-135M plus N extra layers whose outputs are exactly zero.

The extra layers cost real compute (their weights are multiplied like any other), but
their o_proj and down_proj are zero, so the residual stream - and every logit - is the
real SmolLM2's. The real SmolLM2 is then a draft ~(30+N)/30 times cheaper than this target.
"""
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file

from ssdbench.models.checkpoint.source import resolve_model
from ssdbench.models.checkpoint.weights import load_config, load_state_dict

extra, out = int(sys.argv[1]), Path(sys.argv[2])
source = resolve_model("smollm2-135m")
config, state = load_config(source), load_state_dict(source, dtype=torch.float32)
n = config.num_hidden_layers
gen = torch.Generator().manual_seed(0)
for i in range(n, n + extra):
    for name, t in list(state.items()):
        if name.startswith("model.layers.0."):
            new = name.replace("model.layers.0.", f"model.layers.{i}.")
            zero = name.endswith(("o_proj.weight", "down_proj.weight"))
            state[new] = torch.zeros_like(t) if zero else t.clone() if t.dim() == 1 else torch.randn(t.shape, generator=gen) * 0.02
config.num_hidden_layers = n + extra
out.mkdir(parents=True, exist_ok=True)
config.save_pretrained(out)
save_file({k: v.contiguous() for k, v in state.items()}, out / "model.safetensors")
from ssdbench.models.checkpoint.weights import load_tokenizer
load_tokenizer(source).save_pretrained(out)
print("wrote", out, "layers", n + extra)
