"""Forward costs of the embedded pair's steps on one pinned core, fused (kernels/decode_layer.c) and
on the Python path: the target's one-token step and K+1 verify, the int8 draft's one-token step,
catch-up chunk and ssd's masked tree steps of 1..16 branches, and both prefills.

    .venv/bin/python benchmarks/step_costs.py [--core 0] [--context 200] [--repeats 15] [--int8-kernel NAME]

Prints one line per step: median ms, its ratio to the role's one-token step, the kernel that ran that
many rows, and the step's floor on this core (kernels/floors.py: the projections' weight
bytes over the read bandwidth measured here, or their multiply-adds over the core's measured peak for
that kernel's instructions plus attention's float32 ones over the f32 peak, whichever is larger) with the
ratio to it; then one JSON line. A prefill's lm_head reads its last row only, as the engine's does.
`--int8-kernel` / `--linear-kernel` pin the draft's / target's kernel, so one machine times every
path it can run. Run it on a quiet machine; the figures hold for the CPU they were measured on (printed).
"""
import argparse
import json
import os
import statistics
import time

import torch

from ssdbench.kernels.probe import default_cache_path
from ssdbench.models.build import build_native_model, projection_shapes
from ssdbench.kernels.floors import Rates, measure_rates
from ssdbench.models.checkpoint.source import resolve_model
from ssdbench.models.checkpoint.weights import load_config, load_state_dict
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


def load(weights: str, *, int8_kernel: str, linear_kernel: str):
    source = resolve_model("smollm2-135m")
    return build_native_model(load_config(source), load_state_dict(source, dtype=torch.float32), weights=weights,
                              kernel_cache=default_cache_path(), int8_kernel=int8_kernel, linear_kernel=linear_kernel)


def projection_weights(model) -> int:
    """Multiply-adds per token row of the projections and the lm_head (each row's logits are computed)."""
    return layer_weights(model) + lm_head_weights(model)


def layer_weights(model) -> int:
    return sum(i * o for i, o in projection_shapes(model.shape)[:4]) * model.shape.num_layers


def lm_head_weights(model) -> int:
    lm_in, lm_out = projection_shapes(model.shape)[4]
    return lm_in * lm_out


def step_macs(model, key: str) -> int:
    """A step's multiply-adds: every row through the layers and the lm_head, but a prefill's last row only
    through the lm_head (as the engine runs it: decoding/ragged.forward_last)."""
    rows = step_rows(key)
    if key.startswith("prefill"):
        return layer_weights(model) * rows + lm_head_weights(model)
    return projection_weights(model) * rows


def step_rows(key: str) -> int:
    """The token rows of a step named step_1, chunk_5, tree_16, prefill_140."""
    return int(key.rsplit("_", 1)[1])


def kernel_for(probe: dict, rows: int) -> str:
    """The kernel the model's linears run for a call of `rows` rows (its probe record)."""
    return probe["few_rows"] if rows < probe["split_rows"] else probe["many_rows"]


def attention_macs(model, key: str, context: int) -> int:
    """Float32 multiply-adds of a step's attention (scores and values): each query head over the slots its row
    sees, the context and the step's own rows before it (a tree row sees its own branch only: at most K more)."""
    s = model.shape
    rows = step_rows(key)
    seen = rows * (rows + 1) // 2 if key.startswith("prefill") else rows * (context + rows)
    return 2 * s.num_heads * s.head_dim * seen * s.num_layers


def with_floors(costs_ms: dict, model, rates: Rates, bytes_per_weight: int, context: int) -> dict:
    """Each step's median, kernel, floor and ratio to the floor."""
    weights = projection_weights(model)
    probe = model.kernels["linear_probe"]
    out = {}
    for key, ms in costs_ms.items():
        rows = step_rows(key)
        kernel = kernel_for(probe, rows)
        floor, bound = rates.floor_ms(weights * bytes_per_weight, step_macs(model, key), kernel,
                                      attention_macs=attention_macs(model, key, context))
        out[key] = {"ms": ms, "kernel": kernel, "floor_ms": floor, "floor_by": bound, "to_floor": ms / floor}
    return out


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
    last = torch.tensor([[prefill - 1]])  # [1, 1]: the prompt's last row is the only one through the lm_head
    out[f"prefill_{prefill}"] = timed(step(model, prefill, 0, logits_at=last), max(3, repeats // 5))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--core", type=int, default=0)
    parser.add_argument("--context", type=int, default=200)
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--prefill", type=int, default=140)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--int8-kernel", default="auto", help="the draft's int8 kernel: auto (probed) or a name")
    parser.add_argument("--linear-kernel", default="auto", help="the target's dense kernel: auto (probed) or a name")
    parser.add_argument("--roles", default="target,draft", help="which models to time: target, draft or both")
    args = parser.parse_args()
    os.sched_setaffinity(0, {args.core})
    torch.set_num_threads(1)
    results = {}
    rates = {}
    roles = args.roles.split(",")
    for role, weights in (("target", "fp32"), ("draft", "int8")):
        if role not in roles:
            continue
        model = load(weights, int8_kernel=args.int8_kernel, linear_kernel=args.linear_kernel)
        size = 4 if weights == "fp32" else 1
        rates[role] = measure_rates(projection_weights(model) * size)
        kernels = model.kernel_names()
        for fused in (True, False):
            model.fused_decode = fused
            if fused and model.fused is None:
                continue
            name = f"{role} ({weights}, {'fused' if fused else 'python path'})"
            steps = costs(model, context=args.context, k=args.k, repeats=args.repeats, prefill=args.prefill)
            results[name] = {"kernels": f"{kernels['linear']}, {model.kernel_names().get('decode_step', 'unfused')}",
                             "steps": with_floors(steps, model, rates[role], size, args.context)}
    print(f"CPU: {cpu_model()}; one thread on core {args.core}; context {args.context} tokens; K={args.k}")
    for role, r in rates.items():
        print(f"{role} floor rates: read {r.read_bytes_per_s / 1e9:.1f} GB/s at its weights' size, f32 peak "
              f"{r.f32_macs_per_s / 1e9:.0f} GMAC/s, int8 peak {r.int8_macs_per_s / 1e9:.0f} GMAC/s ({r.int8_path}), "
              f"AMX int8 peak {r.tiles_macs_per_s / 1e9:.0f} GMAC/s")
    target_step = next((r["steps"]["step_1"]["ms"] for name, r in results.items() if name.startswith("target")), None)
    for name, r in results.items():
        own_step = r["steps"]["step_1"]["ms"]
        print(f"{name}: kernels {r['kernels']}")
        for key, st in r["steps"].items():
            to_target = "" if target_step is None else f"{st['ms'] / target_step:5.2f}x target step  "
            print(f"  {key:<12} {st['ms']:7.1f} ms  {st['ms'] / own_step:5.2f}x its step  "
                  f"{to_target}kernel {st['kernel']:<12} floor {st['floor_ms']:6.1f} ms "
                  f"({st['floor_by']})  {st['to_floor']:5.2f}x floor")
    print(json.dumps({"cpu": cpu_model(), "context": args.context, "k": args.k,
                      "rates": {role: vars(r) for role, r in rates.items()}, "results": results}))


if __name__ == "__main__":
    main()
