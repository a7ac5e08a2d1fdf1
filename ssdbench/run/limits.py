"""A run's limits, checked after the model configs are read and before any weights are loaded:
the context each request reaches (or `--truncate-prompts left`), and the memory each role will hold.

Every refusal is one UsageError line with the numbers and the largest setting that fits.
"""

from __future__ import annotations

import dataclasses

from ssdbench.errors import UsageError
from ssdbench.models import memory_plan as mp
from ssdbench.models.tensor_parallel import rank_devices
from ssdbench.run.plan import RunPlan


def context_limit(models) -> int | None:
    """The fewest positions any model of the run was built for (max_position_embeddings)."""
    limits = models.context_limits
    return min(limits) if limits else None


def check_new_tokens(plan: RunPlan, limit: int | None) -> None:
    """Before the suite is tokenised: new tokens and drafts alone must leave the context a position for the prompt."""
    if limit is None:
        return
    slack, decode = plan.draft_slack, plan.decode
    if decode.max_new_tokens + slack < limit:
        return
    drafts = f" + {slack} draft positions (K={decode.k})" if slack else ""
    fix = f"the largest --max-new-tokens that fits is {limit - slack - 1} (with a 1-token prompt)" \
        if limit - slack > 1 else "lower --k"
    raise UsageError(f"--max-new-tokens {decode.max_new_tokens}{drafts} fills the model's context of {limit} "
                     f"positions before any prompt token; {fix}")


def fit_prompts(plan: RunPlan, workload, limit: int | None, *, truncate: bool = True):
    """The workload unchanged, or (with --truncate-prompts left, unless `truncate` is False) each over-long
    prompt cut to its last tokens; refuses prompts or lengths beyond the context.
    Returns (workload, truncation record or None)."""
    if limit is None:
        return workload, None
    slack = plan.draft_slack
    longest = max(len(t) for t in workload.token_ids)
    room = limit - plan.decode.max_new_tokens - slack  # for a prompt
    if longest <= room:
        return workload, None
    if room < 1 or not truncate or plan.suite.truncate_prompts != "left":
        raise UsageError(_context_message(plan, workload, limit, slack, room))
    cut = {pid: len(ids) for pid, ids in zip(workload.prompt_ids, workload.token_ids) if len(ids) > room}
    token_ids = tuple(ids[-room:] if len(ids) > room else ids for ids in workload.token_ids)
    record = {"side": "left", "max_prompt_tokens": room, "context_positions": limit, "original_tokens": cut}
    return dataclasses.replace(workload, token_ids=token_ids), record


def _context_message(plan: RunPlan, workload, limit: int, slack: int, room: int) -> str:
    """Why the requests do not fit the context, and the largest settings that would."""
    index = max(range(workload.num_requests), key=lambda i: len(workload.token_ids[i]))
    longest = len(workload.token_ids[index])
    k, new_tokens = plan.decode.k, plan.decode.max_new_tokens
    drafts = f" + {slack} draft positions (K={k})" if slack else ""
    head = (f"prompt {workload.prompt_ids[index]!r} ({longest} tokens) + --max-new-tokens {new_tokens}"
            f"{drafts} = {longest + new_tokens + slack} positions, beyond the model's context of {limit}")
    fixes = []
    if limit - slack - longest >= 1:
        fixes.append(f"the largest --max-new-tokens that fits is {limit - slack - longest}")
    largest_k = (limit - new_tokens - longest) // max(slack // k, 1)
    if slack and largest_k >= 1:
        fixes.append(f"the largest --k that fits is {largest_k}")
    if room >= 1:
        fixes.append(f"--truncate-prompts left would keep each prompt's last {room} tokens")
    return f"{head}; {'; '.join(fixes) or 'nothing fits: lower --max-new-tokens and --k'}"


def available_bytes(device: str) -> int | None:
    """Memory a new allocation can get: the GPU's free memory, or the host's MemAvailable."""
    import torch

    if device.startswith("cuda"):
        index = torch.device(device).index or 0
        return int(torch.cuda.mem_get_info(index)[0])
    try:
        with open("/proc/meminfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def role_needs(plan: RunPlan, shapes, prompt_tokens: int, num_requests: int) -> list[mp.RoleNeed]:
    """What each model of the run holds, from the shapes alone (nothing is loaded)."""
    decode = plan.decode
    itemsize = {"float32": 4, "bfloat16": 2, "float16": 2}[plan.models.dtype]
    target_device, draft_device = plan.target_placement.device, plan.draft_placement.device
    sd_draft_device = plan.models.draft_device or target_device
    target_shape, draft_shape = shapes
    is_int8, copies = plan.draft.int8, _engine_copies(plan)
    rows = min(decode.batch_size, num_requests)  # a batch is never wider than the requests
    # every batch's cache has the run's one capacity, K draft slots included (DecodeSettings.cache_capacity)
    lengths = mp.Lengths(rows, prompt_tokens, decode.max_new_tokens, decode.k)
    if plan.models.tp > 1:
        ranks = rank_devices(target_device, plan.models.tp)
        needs = mp.tensor_parallel_needs(target_shape, lengths, devices=ranks, itemsize=itemsize)
    else:
        needs = [mp.role_need("target", target_device, target_shape, lengths, itemsize=itemsize, num_copies=copies)]
    if draft_shape is not None and any(m.uses_draft and not m.own_process for m in plan.methods):
        need = mp.role_need("draft", sd_draft_device, draft_shape, lengths, itemsize=itemsize, is_int8=is_int8,
                            num_copies=copies)
        if is_int8 and sd_draft_device == "cpu":  # built from the target's checkpoint, already counted
            need = dataclasses.replace(need, weights=mp.weight_bytes(draft_shape, itemsize=itemsize, is_int8=True))
        elif plan.draft.from_target and not is_int8:  # self-skip: a view on the target's own weights
            need = dataclasses.replace(need, weights=0)
        needs.append(need)
    if draft_shape is not None and plan.ssd is not None:
        tree = mp.Lengths(rows, prompt_tokens, decode.max_new_tokens, decode.k,
                          tree_tokens=plan.ssd.fan_out.budget * decode.k)
        need = mp.role_need("ssd draft", draft_device, draft_shape, tree, itemsize=itemsize, is_int8=is_int8)
        if decode.samples_anywhere:  # the tree's q-rows [B, N, K, V] fp32, kept on the draft's device
            q_rows = rows * plan.ssd.fan_out.budget * decode.k * draft_shape.vocab * 4
            need = dataclasses.replace(need, activations=need.activations + q_rows)
        needs.append(need)
    return needs


def _engine_copies(plan: RunPlan) -> int:
    """Builds of each model: one per engine (transformers' baselines share the hf engine's)."""
    uses_hf = "hf" in plan.models.engines or any(m.is_baseline for m in plan.methods)
    return int("native" in plan.models.engines) + int(uses_hf)


def check_memory(plan: RunPlan, models, workload, *, available=available_bytes) -> dict:
    """Refuse a run whose planned memory exceeds what is available; returns the plan for the manifest."""
    prompt_tokens = max(len(t) for t in workload.token_ids)
    return check_memory_of(plan, models, prompt_tokens, workload.num_requests, available=available)


def check_memory_of(plan: RunPlan, models, prompt_tokens: int, num_requests: int, *,
                    available=available_bytes) -> dict:
    """As `check_memory`, for `num_requests` prompts of at most `prompt_tokens` (validate: one filling the context)."""
    try:
        shapes = models.target_shape, models.draft_shape
    except UsageError as err:  # an architecture only transformers' engine runs: its shape is not read here
        if "native" in plan.models.engines:
            raise
        return {"estimate": f"not made: {err}"}

    snapshot: dict[str, int | None] = {}

    def free(device: str) -> int | None:  # read once: the search below needs one number per device
        if device not in snapshot:
            snapshot[device] = available(device)
        return snapshot[device]

    def needs_of(trial: RunPlan) -> list[mp.RoleNeed]:
        return role_needs(trial, shapes, prompt_tokens, num_requests)

    needs = needs_of(plan)
    short = mp.shortfall(needs, free)
    if short is not None:
        raise UsageError(_memory_message(plan, needs_of, free, needs, short, num_requests))
    return {"estimate": "weights, KV caches and the widest forward's activations (ssdbench.models.memory_plan)",
            "roles": [{"role": n.role, "device": n.device, "weights_mib": round(n.weights / 2**20, 1),
                       "kv_cache_mib": round(n.kv_cache / 2**20, 1), "activations_mib": round(n.activations / 2**20, 1)}
                      for n in needs],
            "available_mib": {d: None if (b := free(d)) is None else round(b / 2**20, 1)
                              for d in mp.needs_by_device(needs)}}


def _memory_message(plan: RunPlan, needs_of, free, needs, short, workload_rows: int) -> str:
    device, needed, free_bytes = short
    roles = "; ".join(n.describe() for n in mp.needs_by_device(needs)[device])
    head = f"not enough memory on {device}: about {mp.mib(needed)} needed ({roles}), {mp.mib(free_bytes)} available"

    def fits(**change) -> bool:
        return mp.shortfall(needs_of(plan.with_decode(**change)), free) is None

    decode = plan.decode
    new_tokens = mp.largest_fitting(lambda n: fits(max_new_tokens=n), decode.max_new_tokens)
    batch = mp.largest_fitting(lambda b: fits(batch_size=b), min(decode.batch_size, workload_rows))
    options = []
    if new_tokens:
        options.append(f"--max-new-tokens {new_tokens} at --batch-size {decode.batch_size}")
    if batch:
        options.append(f"--batch-size {batch} at --max-new-tokens {decode.max_new_tokens}")
    if not options:
        if fits(max_new_tokens=1, batch_size=1):
            options.append("lower both --batch-size and --max-new-tokens")
    if not options:
        return f"{head}; nothing fits: even batch 1 with 1 new token needs more (a smaller model or --dtype?)"
    return f"{head}; largest that fits: {' or '.join(options)}"
