"""One `ssdbench run` end to end: check inputs, claim the run directory, decode, record.

Cheap checks (options, suite, model paths, vocabularies, the output directory) all happen
before any model is loaded, so bad input costs nothing and leaves nothing behind.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from ssdbench.benchmark import Workload, count_units, pinned_placement, run_all
from ssdbench.config import RunConfig
from ssdbench.decoding.hf_baselines import describe_baselines
from ssdbench.decoding.recorder import Recorder
from ssdbench.errors import UsageError
from ssdbench.models.model_set import ModelSet


@dataclass
class RunOutcome:
    path: Path
    manifest: dict
    recorder: Recorder


def prepare_workload(config: RunConfig, models: ModelSet):
    """Load the suite, pick its prompts, tokenise them once for every variant."""
    from ssdbench.suites import describe_template, load_suite, render_prompt_ids

    suite = load_suite(config.suite, data_dir=config.data_dir)
    prompts = suite.prompts if not config.num_prompts else suite.prompts[: config.num_prompts]
    tokenizer = models.tokenizer
    ids = tuple(tuple(render_prompt_ids(tokenizer, p, use_chat_template=config.chat_template)) for p in prompts)
    workload = Workload(
        suite=suite.name, prompt_ids=tuple(p.prompt_id for p in prompts), token_ids=ids, eos_ids=_eos_ids(models)
    )
    info = {"name": suite.name, "source": suite.source, "sha256": suite.content_hash(),
            "num_prompts": len(prompts), "prompt_ids": list(workload.prompt_ids),
            "text_fields": suite.text_fields(len(prompts)),
            "chat_template": describe_template(tokenizer, config.chat_template)}
    return workload, info


def _eos_ids(models: ModelSet) -> frozenset[int]:
    eos = models.target_hf_config.eos_token_id
    if eos is None:
        eos = models.tokenizer.eos_token_id
    return frozenset(eos if isinstance(eos, (list, tuple)) else [eos] if eos is not None else [])


def base_manifest(config: RunConfig, models: ModelSet, suite_info: dict) -> dict:
    from ssdbench.records.manifest import capture_environment

    from ssdbench.speculation.setup import fan_out_policy, placements

    target_place, draft_place = placements(config)
    roles = {"target": {"spec": config.target, "name": models.target_source.name, "origin": models.target_source.origin,
                        "placement": target_place.describe()}}
    roles["draft"] = {"spec": config.draft, "sd": "in the target's process, on the target's placement (as the paper's SD)"}
    if "ssd" in config.methods:
        roles["draft"]["ssd"] = {"process": "its own (spawned), shared-memory mailbox", "placement": draft_place.describe()}
    if models.draft_source is not None:
        roles["draft"].update(name=models.draft_source.name, origin=models.draft_source.origin)
    manifest = {"config": config.to_dict(), "suite": suite_info, "models": roles, "environment": capture_environment(),
                "attention_backend": config.attention, "engines": list(config.engines),
                "order": _describe_order(config.order)}
    pinned = pinned_placement(config)
    baselines = describe_baselines(config, pinned.describe() if pinned else
                                   {"spec": config.device, "cores": None, "threads": config.threads or "torch default"})
    if baselines:
        manifest["baselines"] = baselines
    if "ssd" in config.methods:
        policy = fan_out_policy(config)
        manifest["ssd"] = {"fan_out": policy.description, "after_hit": list(policy.after_hit),
                           "after_miss": list(policy.after_miss), "backup": config.backup, "saguaro_c": config.saguaro_c,
                           "round_timeout_s": config.round_timeout_s}
    return manifest


def _describe_order(order: str) -> dict:
    what = ("every method on one batch of prompts before the next batch" if order == "interleaved"
            else "all requests of one method, then the next method")
    return {"order": order, "meaning": what}


def model_hashes(models: ModelSet) -> dict:
    from ssdbench.models.weights import weight_file_hashes

    hashes = {"target": weight_file_hashes(models.target_source)}
    if models.draft_source is not None:
        hashes["draft"] = weight_file_hashes(models.draft_source)
    return hashes


def execute(config: RunConfig, writer, models: ModelSet, workload: Workload, advance) -> Recorder:
    """Decode every variant and write the records; the writer marks failures and interrupts."""
    from ssdbench.profiling.nvml import GpuSampler

    if config.threads:
        torch.set_num_threads(config.threads)
    recorder = Recorder(run_id=writer.manifest["run_id"])
    bandwidth = _measure_bandwidth(config, models.device)
    sampler = GpuSampler(_gpu_roles(config.device))
    with sampler:
        calibration = run_all(config, models, workload, recorder, advance)
    telemetry = sampler.unavailable_reason or "sampled"
    if not sampler.rows and torch.device(config.device).type != "cuda":
        telemetry = f"no GPU telemetry: models ran on {config.device}"
    extra = {"gpu_telemetry": telemetry, "model_hashes": model_hashes(models), "num_units": count_units(config, workload),
             "memory_read_bandwidth_gbs": bandwidth and bandwidth.gbs,
             "memory_read_bandwidth": bandwidth and bandwidth.describe(), "target_weight_bytes_per_forward": _weight_bytes(models),
             "kernels": {**models.kernels_used(), **recorder.kernels}, "kernel_probes": models.kernel_probes(),
             "calibration": calibration}
    if recorder.events and config.timeline:
        extra["timeline"] = _save_timeline(recorder, writer.path)
    optional = {"events": recorder.events} if recorder.events else None
    writer.finish(recorder.steps, recorder.requests, sampler.rows, extra, optional=optional)
    return recorder


def _save_timeline(recorder: Recorder, path: Path) -> str:
    """timeline.png beside the records; a plotting problem is noted, never fatal to the run."""
    import pandas as pd

    from ssdbench.report.timeline import plot_timeline

    try:
        plot_timeline(pd.DataFrame(recorder.steps), pd.DataFrame(recorder.events), path / "timeline.png")
    except Exception as err:  # noqa: BLE001 - a picture must not cost the run its records
        return f"not drawn: {type(err).__name__}: {err}"
    return "timeline.png"


def _gpu_roles(device: str) -> dict[int, str]:
    """NVML device index -> role, for the GPU sampler (empty on CPU)."""
    dev = torch.device(device)
    if dev.type != "cuda":
        return {}
    return {dev.index or 0: "target+draft"}


def validate(config: RunConfig) -> None:
    """Everything that can be checked without loading a model: suite, attention backend, output directory,
    devices and cores, ssd settings."""
    from ssdbench.kernels.registry import get_backend
    from ssdbench.records.writer import refuse_inside_run
    from ssdbench.speculation.mailbox import check_store_order
    from ssdbench.speculation.setup import fan_out_policy, placements
    from ssdbench.suites import load_suite

    load_suite(config.suite, data_dir=config.data_dir)
    get_backend(config.attention)
    if config.out is not None:
        refuse_inside_run(config.out)  # checked again when the directory is claimed
    placements(config)  # devices and cores exist here, and ssd's two roles do not share cores
    if "ssd" in config.methods:
        check_store_order()
        check_tree_size(config, fan_out_policy(config))


def check_tree_size(config: RunConfig, policy) -> None:
    """ssd drafts (fan-out budget) x K tokens per row every round: bounded, so a typo cannot stall the draft."""
    from ssdbench.models.memory_plan import MAX_TREE_TOKENS

    tokens = policy.budget * config.k
    if tokens > MAX_TREE_TOKENS:
        largest = max(MAX_TREE_TOKENS // config.k, 1)
        raise UsageError(f"ssd fan-out budget {policy.budget} x --k {config.k} = {tokens} tree tokens per row per round, "
                         f"above the maximum of {MAX_TREE_TOKENS}; at --k {config.k} the largest budget is {largest} "
                         f"(e.g. --fan-out {max(largest // (config.k + 1), 1)})")


def prepare(config: RunConfig) -> tuple[ModelSet, Workload, dict]:
    """Resolve both models (clear errors if missing), check vocabularies, tokenise the suite, fit the context."""
    from ssdbench.limits import check_new_tokens, context_limit, fit_prompts

    models = ModelSet(config)
    models.target_source, models.draft_source  # noqa: B018 - resolving is the check
    limit = context_limit(models)
    check_new_tokens(config, limit)  # before loading the tokenizer: 10^8 new tokens is refused at once
    models.check_vocabularies()
    models.check_weights()
    workload, suite_info = prepare_workload(config, models)
    workload, truncation = fit_prompts(config, workload, limit)
    if truncation:
        suite_info["truncation"] = truncation
    return models, workload, suite_info


def check_limits(config: RunConfig, models: ModelSet, workload: Workload) -> dict:
    """Context and memory of one run point, before anything is allocated; the plan, for the manifest."""
    import dataclasses

    from ssdbench.limits import check_memory, context_limit, fit_prompts

    limit = context_limit(models)
    fit_prompts(dataclasses.replace(config, truncate_prompts="none"), workload, limit)  # prompts already fitted
    return {"context_positions": limit, "memory_plan": check_memory(config, models, workload)}


def run_point(config: RunConfig, models: ModelSet, workload: Workload, suite_info: dict, advance) -> RunOutcome:
    """Claim the run directory, decode every variant, write the records (or mark the run failed)."""
    from ssdbench.records.writer import RunWriter, default_run_dir, new_run_id

    limits = check_limits(config, models, workload)
    run_id = new_run_id()
    path = config.out or default_run_dir(run_id=run_id)
    with RunWriter.create(path, run_id, {**base_manifest(config, models, suite_info), "limits": limits}) as writer:
        recorder = execute(config, writer, models, workload, advance)
    return RunOutcome(path=writer.path, manifest=writer.manifest, recorder=recorder)


def _measure_bandwidth(config: RunConfig, device: str):
    """This machine's read bandwidth (a BandwidthReading), measured where the target runs, for the MBU column."""
    from ssdbench.profiling.bandwidth import measure_steady_read_bandwidth
    from ssdbench.profiling.placement import pinned
    from ssdbench.speculation.setup import placements

    target_placement = placements(config)[0] if "ssd" in config.methods or config.target_device else None
    try:
        with pinned(target_placement):
            return measure_steady_read_bandwidth(torch.device(device).type)
    except (RuntimeError, ValueError):
        return None


def _weight_bytes(models: ModelSet) -> int | None:
    """Bytes of target weights one forward reads (from the native engine's own layout)."""
    if "native" not in models.config.engines:
        return None
    return int(models.target("native").weight_bytes_per_forward())
