"""Turning a run's settings into SSD's pieces: placements, fan-out policy, the draft process."""

from __future__ import annotations

import torch

from ssdbench.config import RunConfig
from ssdbench.errors import UsageError
from ssdbench.models.model_set import SELF_INT8, ModelSet
from ssdbench.profiling.devices import check_device
from ssdbench.profiling.placement import Placement, check_disjoint, default_placements, parse_placement
from ssdbench.speculation.fan_out import FanOut, build_fan_out
from ssdbench.speculation.server import DraftSpec

DEFAULT_POWER_LAW_R = 0.5  # used when the fitted run has a single fan-out (r cannot be fitted)


def placements(config: RunConfig) -> tuple[Placement, Placement]:
    """(target, draft). On CPU with ssd in the run: one half of the cores each by default."""
    check_device(config.device)
    default_target = default_draft = config.device
    if torch.device(config.device).type == "cpu" and "ssd" in config.methods:
        default_target, default_draft = default_placements()
    elif torch.device(config.device).type == "cuda":
        default_draft = "cuda:1" if torch.cuda.device_count() > 1 else config.device
    target = parse_placement(config.target_device or default_target, flag="--target-device")
    draft = parse_placement(config.draft_device or default_draft, flag="--draft-device")
    if "ssd" in config.methods:
        check_disjoint(target, draft, given=(config.target_device is not None, config.draft_device is not None))
    return target, draft


def fan_out_policy(config: RunConfig, *, budget: int | None = None) -> FanOut:
    geometric = None
    if config.fan_out == "geometric":
        geometric = fit_geometric(config, budget=budget or 3 * (config.k + 1))
    return build_fan_out(config.fan_out, k=config.k, fan_out_list=config.fan_out_list,
                         miss_list=config.fan_out_miss_list, geometric=geometric)


def fit_geometric(config: RunConfig, *, budget: int) -> tuple[float, float, int]:
    """Acceptance a (and the miss power law r, when several fan-outs were run) from --fit-from."""
    if config.fit_from is None:
        raise UsageError("--fan-out geometric needs --fit-from RUN: a previous sd or ssd run to fit acceptance from")
    from ssdbench.projection.theory import fit_acceptance, fit_power_law
    from ssdbench.records.reader import load_run

    steps = load_run(config.fit_from).steps
    steps = steps[steps["method"].isin(["sd", "ssd"])]
    if steps.empty:
        raise UsageError(f"--fit-from {config.fit_from}: no sd or ssd rounds to fit acceptance from")
    a = fit_acceptance(steps)
    fitted = fit_power_law(steps[steps["method"] == "ssd"]) if "ssd" in set(steps["method"]) else None
    r = fitted[0] if fitted else DEFAULT_POWER_LAW_R
    return float(a), float(r), budget


def draft_spec(config: RunConfig, models: ModelSet, draft: Placement, fan_out: FanOut) -> DraftSpec:
    source = models.target_source if config.draft == SELF_INT8 else models.draft_source
    return DraftSpec(
        model_path=str(source.path), int8=config.draft == SELF_INT8, dtype=config.dtype, device=draft.device,
        cores=draft.cores, attention=config.attention, linear_kernel=config.linear_kernel, lookahead=config.k,
        fan_out=fan_out, backup=config.backup, saguaro_c=config.saguaro_c, seed=config.seed,
        trust_remote_code=config.trust_remote_code,
    )
