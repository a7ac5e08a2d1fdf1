"""Forward costs of the embedded pair's steps on one pinned core, fused (kernels/decode_layer.c) and
on the Python path: the target's one-token step and K+1 verify, the int8 draft's one-token step,
catch-up chunk and ssd's masked tree steps of 1..16 branches, and both prefills.

    .venv/bin/python benchmarks/step_costs.py [--core 0] [--context 200] [--repeats 15]

Prints one line per step (median ms, and its ratio to the target's one-token step), then one JSON
line. Run it on a quiet machine; the figures hold for the CPU they were measured on (printed).
"""
import argparse
import json
import os
import statistics
import time

import torch

from ssdbench.kernels.probe import default_cache_path
from ssdbench.models.llama import build_native_model
from ssdbench.models.source import resolve_model
from ssdbench.models.weights import load_config, load_state_dict
from ssdbench.profiling.environment import cpu_model
from ssdbench.speculation.tree import Branch, layout_tree


def timed(fn, repeats: int) -> float:
    fn()  # warm
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def load(weights: str):
    source = resolve_model("smollm2-135m")
    return build_native_model(load_config(source), load_state_dict(source, dtype=torch.float32), weights=weights,
                              kernel_cache=default_cache_path())


def step(model, tokens: int, at: int, **kwargs):
    ids = torch.ones(1, tokens, dtype=torch.int64)  # [1, T]
    positions = torch.arange(at, at + tokens).unsqueeze(0)  # [1, T]
    return lambda: model.forward(ids, positions, **kwargs)


def tree_step(model, width: int, context: int, k: int, max_len: int):
    branches = [[Branch(k, c, 1.0) for c in range(width)]]
    layout = layout_tree(branches, [context - 1], tree_base=context + k + 2, depth=k)
    ids = torch.ones(1, width, dtype=torch.int64)  # [1, N]
    mask = layout.mask(0, max_len)  # [1, N, S]
    return lambda: model.forward(ids, layout.positions, slots=layout.slots(0), attn_mask=mask)


def costs(model, *, context: int, k: int, repeats: int, prefill: int) -> dict:
    max_len = context + k + 2 + 16 * k + 8
    model.allocate(1, max_len)
    model.forward(torch.ones(1, context, dtype=torch.int64), torch.arange(context).unsqueeze(0))
    out = {"step_1": timed(step(model, 1, context), repeats),
           f"chunk_{k + 1}": timed(step(model, k + 1, context), repeats)}
    for width in (1, 2, 4, 8, 16):
        out[f"tree_{width}"] = timed(tree_step(model, width, context, k, max_len), repeats)
    model.allocate(1, max_len)
    out[f"prefill_{prefill}"] = timed(step(model, prefill, 0), max(3, repeats // 5))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--core", type=int, default=0)
    parser.add_argument("--context", type=int, default=200)
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--prefill", type=int, default=140)
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    os.sched_setaffinity(0, {args.core})
    torch.set_num_threads(1)
    results = {}
    for role, weights in (("target", "fp32"), ("draft", "int8")):
        model = load(weights)
        kernels = model.kernel_names()
        for fused in (True, False):
            model.fused_decode = fused
            if fused and model.fused is None:
                continue
            name = f"{role} ({weights}, {'fused' if fused else 'python path'})"
            results[name] = {"kernels": f"{kernels['linear']}, {model.kernel_names().get('decode_step', 'unfused')}",
                             **costs(model, context=args.context, k=args.k, repeats=args.repeats,
                                     prefill=args.prefill)}
    base = next(r["step_1"] for name, r in results.items() if name.startswith("target"))
    print(f"CPU: {cpu_model()}; one thread on core {args.core}; context {args.context} tokens; K={args.k}")
    for name, r in results.items():
        print(f"{name}: kernels {r['kernels']}")
        print("  " + ", ".join(f"{key} {ms:.1f} ms ({ms / base:.2f}x)" for key, ms in r.items() if key != "kernels"))
    print(json.dumps({"cpu": cpu_model(), "context": args.context, "k": args.k, "ms": results}))


if __name__ == "__main__":
    main()
