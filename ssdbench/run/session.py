"""One `ssdbench run` end to end: check inputs, claim the run directory, decode, record.

Cheap checks (options, suite, model paths, vocabularies, the output directory) all happen
before any model is loaded, so bad input costs nothing and leaves nothing behind.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from ssdbench.decoding.recorder import Recorder
from ssdbench.decoding.workload import Workload
from ssdbench.kernels.registry import get_backend
from ssdbench.models.drafts import SELF_SKIP
from ssdbench.endpoints.dtypes import float_dtype
from ssdbench.endpoints.identity import mark_text_identity, without_text_judged
from ssdbench.metrics.near_ties import greedy_divergences, next_token_logits
from ssdbench.models.dtypes import torch_dtype
from ssdbench.models.model_set import ModelSet
from ssdbench.models.tensor_parallel import rank_devices
from ssdbench.profiling.bandwidth import measure_steady_read_bandwidth
from ssdbench.profiling.devices import make_current
from ssdbench.profiling.environment import capture_environment
from ssdbench.profiling.nvml import GpuSampler
from ssdbench.profiling.placement import pinned
from ssdbench.records.writer import RunWriter, default_run_dir, new_run_id, refuse_inside_run, stop_reason
from ssdbench.report.timeline import plot_timeline
from ssdbench.run.execute import count_units, run_all
from ssdbench.run.limits import check_memory, context_limit, fit_prompts
from ssdbench.run.model_checks import check_models
from ssdbench.run.plan import RunPlan
from ssdbench.suites import describe_template, load_suite, render_prompt_ids


@dataclass
class RunOutcome:
    path: Path
    manifest: dict
    recorder: Recorder


def prepare_workload(plan: RunPlan, models: ModelSet):
    """Load the suite, pick its prompts, tokenise them once for every variant."""
    request = plan.suite
    suite = load_suite(request.name, data_dir=request.data_dir)
    prompts = suite.prompts if not request.num_prompts else suite.prompts[: request.num_prompts]
    tokenizer = models.tokenizer
    ids = tuple(tuple(render_prompt_ids(tokenizer, p, use_chat_template=request.chat_template)) for p in prompts)
    workload = Workload(
        suite=suite.name, prompt_ids=tuple(p.prompt_id for p in prompts), token_ids=ids, eos_ids=models.eos_ids,
        texts=tuple(p.text for p in prompts))
    info = {"name": suite.name, "source": suite.source, "sha256": suite.content_hash(),
            "num_prompts": len(prompts), "prompt_ids": list(workload.prompt_ids),
            "text_fields": suite.text_fields(len(prompts)),
            "categories": {p.prompt_id: p.category for p in prompts if p.category is not None},  # for export
            "chat_template": describe_template(tokenizer, request.chat_template)}
    return workload, info


def base_manifest(plan: RunPlan, models: ModelSet, workload: Workload, suite_info: dict) -> dict:
    settings = plan.settings
    roles = {"target": {"spec": settings.target, "name": models.target_source.name,
                        "origin": models.target_source.origin, "placement": plan.target_placement.describe()}}
    roles["draft"] = {"spec": plan.draft.spec, "sd": "in the target's process, on the target's placement (as the paper's SD)"
                      if plan.models.draft_device is None else
                      f"in the target's process, on {plan.models.draft_device} (--sd-draft-device)"}
    if plan.own_process:
        roles["draft"]["ssd"] = {"process": "its own (spawned), shared-memory mailbox",
                                 "placement": plan.draft_placement.describe()}
    if models.draft_source is not None:
        roles["draft"].update(name=models.draft_source.name, origin=models.draft_source.origin)
    if plan.draft.kind == SELF_SKIP and plan.loads_draft_model:
        roles["draft"]["self_skip"] = (models.skip_choice.to_dict() if models.skip_choice is not None
                                       else {"layers": list(models.skip_layers), "chosen_by": "--draft"})
    manifest = {"config": settings.to_dict(), "suite": suite_info, "models": roles, "environment": capture_environment(),
                "attention_backend": plan.models.attention, "engines": list(plan.models.engines),
                "order": _describe_order(plan.order), "acceptance": plan.decode.acceptance}
    if plan.endpoints is not None:
        manifest["endpoints"] = plan.endpoints.describe()
    if plan.decode.synthetic is not None:
        manifest["acceptance_note"] = ("synthetic acceptance: sd and ssd accepted drafts by coin flips, not by the "
                                       "target; their outputs are not the target's (ar's are)")
    for method in plan.methods:
        described = method.describe(plan.method_context("native", models, workload))
        if described is None:
            continue
        if method.is_baseline:
            manifest.setdefault("baselines", {})[method.name] = described
        else:
            manifest[method.name] = described
    return manifest


def _describe_order(order: str) -> dict:
    what = ("every method on one batch of prompts before the next batch" if order == "interleaved"
            else "all requests of one method, then the next method")
    return {"order": order, "meaning": what}


def execute(plan: RunPlan, writer, models: ModelSet, workload: Workload, advance) -> Recorder:
    """Decode every variant and write the records; the writer marks failures and interrupts."""
    if plan.threads:
        torch.set_num_threads(plan.threads)
    recorder = Recorder(run_id=writer.manifest["run_id"])
    model_hashes = models.weight_hashes()  # before decoding: a run that stops early records them too
    bandwidth = _measure_bandwidth(plan)
    device = plan.target_placement.device
    sampler = GpuSampler(gpu_roles(plan))
    try:
        with sampler:
            calibration = run_all(plan, models, workload, recorder, advance)
    except BaseException as err:  # Ctrl-C, a signal, a dead draft process or rank: keep what was measured
        facts = {"model_hashes": model_hashes, "num_units": count_units(plan, workload),
                 "kernels": {**models.kernels_used(), **recorder.kernels}}
        writer.fail(*stop_reason(err), steps_cols=recorder.steps, requests_cols=recorder.requests,
                    gpu_rows=sampler.rows, extra_manifest=facts)
        raise
    telemetry = sampler.unavailable_reason or "sampled"
    if not sampler.rows and torch.device(device).type != "cuda":
        telemetry = f"no GPU telemetry: models ran on {device}"
    extra = {"gpu_telemetry": telemetry, "model_hashes": model_hashes, "num_units": count_units(plan, workload),
             "memory_read_bandwidth_gbs": bandwidth and bandwidth.gbs,
             "memory_read_bandwidth": bandwidth and bandwidth.describe(), "target_weight_bytes_per_forward": _weight_bytes(models) if plan.methods else None,
             "kernels": {**models.kernels_used(), **recorder.kernels}, "kernel_probes": models.kernel_probes(),
             "calibration": calibration, "ssd_channel": recorder.channels}
    if plan.decode.greedy and plan.decode.synthetic is None:
        mark_text_identity(recorder.endpoints, recorder.requests,
                           lambda ids: models.tokenizer.decode(ids, skip_special_tokens=True))
        extra["greedy_divergences"] = _greedy_divergences(models, recorder, plan)
    if recorder.events and plan.timeline:
        extra["timeline"] = _save_timeline(recorder, writer.path)
    optional = {name: table for name, table in (("events", recorder.events), ("endpoints", recorder.endpoints))
                if table} or None
    writer.finish(recorder.steps, recorder.requests, sampler.rows, extra, optional=optional)
    return recorder


def _greedy_divergences(models: ModelSet, recorder: Recorder, plan: RunPlan) -> list[dict] | str:
    """Each request whose greedy output departs from ar's, with the target's margin there (near_ties.py);
    the target runs only where there is a departure. An endpoint's departures are bounded by its server's dtype
    (unverifiable where it reports none), and its requests judged on text are left out (their ids are
    re-tokenised: `endpoints/identity.py` compares them). A failure is noted, never fatal to the run."""
    engines = models.config.engines
    own = torch_dtype(models.config.dtype)
    servers = {v.label: v.server.dtype for v in plan.endpoints.variants()} if plan.endpoints is not None else {}

    def logits_of(token_ids: list[int]) -> torch.Tensor:
        return next_token_logits(models.target("native" if "native" in engines else engines[0]), token_ids)

    def dtype_of(label: str) -> torch.dtype | None:
        return own if label not in servers else _server_bound(own, servers[label])

    requests = without_text_judged(recorder.requests, recorder.endpoints)
    try:
        return [d.describe() for d in greedy_divergences(requests, logits_of, own, dtype_of=dtype_of,
                                                         layers=models.target_shape.num_layers)]
    except (RuntimeError, ValueError) as err:
        return f"not classified: {type(err).__name__}: {err}"


def _server_bound(own: torch.dtype, server_dtype: str | None) -> torch.dtype | None:
    """The dtype whose rounding bounds a server's near-ties: the coarser of the run's and the one the server
    reports; None where it reports no float dtype (the departure is then unverifiable)."""
    name = float_dtype(server_dtype)
    if name is None:
        return None
    theirs = getattr(torch, name)
    return theirs if torch.finfo(theirs).eps > torch.finfo(own).eps else own


def _save_timeline(recorder: Recorder, path: Path) -> str:
    """timeline.png beside the records; a plotting problem is noted, never fatal to the run."""
    import pandas as pd


    try:
        plot_timeline(pd.DataFrame(recorder.steps), pd.DataFrame(recorder.events), path / "timeline.png")
    except Exception as err:  # noqa: BLE001 - a picture must not cost the run its records
        return f"not drawn: {type(err).__name__}: {err}"
    return "timeline.png"


def gpu_roles(plan: RunPlan) -> dict[int, str]:
    """Device index -> what runs there (target or its ranks, sd's draft, ssd's draft process), for the
    GPU sampler (which finds each in NVML by its UUID); empty on CPU."""
    roles: dict[int, str] = {}

    def add(device: str, role: str) -> None:
        dev = torch.device(device)
        if dev.type == "cuda":
            index = dev.index or 0
            roles[index] = f"{roles[index]}+{role}" if index in roles else role

    tp = plan.models.tp
    for rank, device in enumerate(rank_devices(plan.target_placement.device, tp)):
        add(device, "target" if tp == 1 else f"target rank {rank}")
    if plan.loads_draft_model and any(m.uses_draft and not m.own_process for m in plan.methods):
        add(plan.models.draft_device or plan.target_placement.device, "draft")
    if plan.ssd is not None:
        add(plan.draft_placement.device, "ssd draft")
    return roles


def validate(plan: RunPlan) -> None:
    """What the plan cannot check without files: the suite, the attention backend, the output directory.
    (Methods, draft, devices, cores and ssd's policy were checked when the plan was made.)"""
    load_suite(plan.suite.name, data_dir=plan.suite.data_dir)
    get_backend(plan.models.attention)
    if plan.out is not None:
        refuse_inside_run(plan.out)  # checked again when the directory is claimed


def prepare(plan: RunPlan) -> tuple[ModelSet, Workload, dict]:
    """Resolve both models (clear errors if missing), check vocabularies, tokenise the suite, fit the context."""
    make_current(plan.models.device)
    models = ModelSet(plan.models)
    limit = check_models(plan, models)  # the checks `validate` runs too
    workload, suite_info = prepare_workload(plan, models)
    workload, truncation = fit_prompts(plan, workload, limit)
    if truncation:
        suite_info["truncation"] = truncation
    return models, workload, suite_info


def calibrate_drafts(plan: RunPlan, models: ModelSet, workload: Workload) -> None:
    """self-skip:auto's choice of layers, on the run's prompts: it loads the target, so it comes after
    `check_limits` (a GPU's free memory would no longer count the target's weights)."""
    if plan.loads_draft_model and plan.draft.needs_calibration:
        models.calibrate_self_skip([list(t) for t in workload.token_ids], k=plan.decode.k)


def check_limits(plan: RunPlan, models: ModelSet, workload: Workload) -> dict:
    """Context and memory of one run point, before anything is allocated; the plan, for the manifest."""
    limit = context_limit(models)
    fit_prompts(plan, workload, limit, truncate=False)  # prompts already fitted
    return {"context_positions": limit, "memory_plan": check_memory(plan, models, workload)}


def run_point(plan: RunPlan, models: ModelSet, workload: Workload, suite_info: dict, advance, *,
              limits: dict) -> RunOutcome:
    """Claim the run directory, decode every variant, write the records (or mark the run failed).

    `limits`: `check_limits` of this plan, taken before any model was loaded: afterwards the device's
    free memory no longer counts what the loaded models (and the allocator's held blocks) occupy."""
    run_id = new_run_id()
    path = plan.out or default_run_dir(run_id=run_id)
    manifest = {**base_manifest(plan, models, workload, suite_info), "limits": limits}
    with RunWriter.create(path, run_id, manifest) as writer:
        recorder = execute(plan, writer, models, workload, advance)
    return RunOutcome(path=writer.path, manifest=writer.manifest, recorder=recorder)


def _measure_bandwidth(plan: RunPlan):
    """This machine's read bandwidth (a BandwidthReading), measured where the target runs, for the MBU column."""
    try:
        with pinned(plan.pinned):
            return measure_steady_read_bandwidth(torch.device(plan.models.device).type)
    except (RuntimeError, ValueError):
        return None


def _weight_bytes(models: ModelSet) -> int | None:
    """Bytes of target weights one forward reads (from the native engine's own layout)."""
    if "native" not in models.config.engines:
        return None
    return int(models.target("native").weight_bytes_per_forward())
