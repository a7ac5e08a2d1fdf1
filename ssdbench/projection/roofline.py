"""Roofline cost model: what one forward pass costs on a GPU, and each method's decode speed.

One forward over `tokens` new positions per sequence, batch B, KV length `context`, on n
GPUs (tensor parallel, communication ignored):

    time = max(bytes / (bandwidth·efficiency·n), FLOPs / (peak·efficiency·n))
    bytes = weights read per forward + B·context·KV bytes per token
    FLOPs = 2·params·tokens·B + 4·layers·heads·head_dim·context·tokens·B

`efficiency` (DEFAULT_EFFICIENCY = 0.6) is the share of datasheet bandwidth and peak a
real decode step reaches. Before efficiency, Llama-3.1-70B at bf16 on 4×H100 costs
~140 GB / 13.4 TB/s ≈ 10.4 ms per token (~96 tok/s); at 0.6 that is ~58 tok/s, against
54.7 tok/s measured in the SSD paper. Weights and KV are bf16 (2 bytes), an int8 draft 1.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path

from ssdbench.errors import UsageError
from ssdbench.projection.hardware import GpuSpec
from ssdbench.projection.theory import ssd_speedup

DEFAULT_EFFICIENCY = 0.6
KV_BYTES = 2
MEMORY_HEADROOM = 1.2  # weights need this much room (KV cache, activations) to count as fitting
DEFAULT_FAN_OUT_PER_K = 3  # the reference engine's uniform fan-out, per accepted count


@dataclass(frozen=True)
class Model:
    name: str
    shape: object  # ssdbench.models.shape.ModelShape
    weight_bytes: int  # bytes per weight: 2 for bf16, 1 for int8

    def params_per_forward(self) -> int:
        import torch

        return self.shape.weight_bytes_per_forward(torch.int8)  # int8: one byte per parameter

    def checkpoint_bytes(self) -> int:
        return self.shape.num_params() * self.weight_bytes


@dataclass(frozen=True)
class Deployment:
    gpu: GpuSpec
    target_gpus: int
    draft_gpus: int
    efficiency: float
    context: float  # KV length per sequence
    batch: int


def forward_ms(model: Model, gpu: GpuSpec, *, num_gpus: int, tokens: int, context: float, batch: int = 1,
               efficiency: float = DEFAULT_EFFICIENCY) -> float:
    """Roofline time of one forward over `tokens` positions per sequence (see module doc)."""
    s = model.shape
    params = model.params_per_forward()
    kv_bytes = batch * context * 2 * s.num_layers * s.num_kv_heads * s.head_dim * KV_BYTES
    moved = params * model.weight_bytes + kv_bytes
    flops = 2 * params * tokens * batch + 4 * s.num_layers * s.num_heads * s.head_dim * context * tokens * batch
    seconds = max(moved / (gpu.bandwidth_tbs * 1e12 * efficiency * num_gpus),
                  flops / (gpu.bf16_tflops * 1e12 * efficiency * num_gpus))
    return seconds * 1e3


def gpus_to_fit(model: Model, gpu: GpuSpec) -> int:
    """Smallest power-of-two GPU count whose memory holds the weights with headroom."""
    n = 1
    while n * gpu.memory_gb * 1e9 < MEMORY_HEADROOM * model.checkpoint_bytes() and n < 1024:
        n *= 2
    return n


def _known(text: str):
    from ssdbench.models.checkpoint.aliases import alias_repo_id
    from ssdbench.models.shape import KNOWN_SHAPES

    name = (alias_repo_id(text) or text).strip().lower().rsplit("/", 1)[-1]
    name = name.removesuffix(".gguf").removesuffix("-instruct")
    return KNOWN_SHAPES.get(name)


def _from_folder(origin: str):
    folder = Path(origin)
    if not (folder / "config.json").is_file():
        return None
    from transformers import AutoConfig

    from ssdbench.models.shape import ModelShape

    try:
        # never the folder's own code: projecting a recorded run must not run anything from it
        return ModelShape.from_hf_config(AutoConfig.from_pretrained(folder, local_files_only=True,
                                                                    trust_remote_code=False))
    except (OSError, ValueError, UsageError):
        return None


def _resolve(role: str, entry: dict, override: str | None) -> Model:
    from ssdbench.models.shape import known_shape

    if override:
        return Model(override, known_shape(override), 2)
    texts = [str(entry.get(key)) for key in ("spec", "name") if entry.get(key)]
    for text in texts:
        if (shape := _known(text)) is not None:
            return Model(text, shape, 2)
    shape = _from_folder(str(entry.get("origin", ""))) if entry.get("origin") else None
    if shape is None:
        raise UsageError(f"cannot tell the {role}'s shape from the run (model {texts[-1] if texts else '?'!r}); "
                         f"pass --{role}-shape, e.g. llama-3.1-70b")
    return Model(texts[-1], shape, 2)


def resolve_models(manifest: dict, *, target_shape: str | None = None,
                   draft_shape: str | None = None) -> tuple[Model, Model | None]:
    """Target and draft shapes: overrides, else the run's model names/folders. ngram → no draft."""
    roles = manifest.get("models", {})
    target = _resolve("target", roles.get("target", {}), target_shape)
    draft_entry = roles.get("draft", {})
    spec = draft_entry.get("spec")
    if draft_shape:
        return target, _resolve("draft", draft_entry, draft_shape)
    if spec == "ngram":
        return target, None
    if spec == "self-int8":
        return target, Model(f"{target.name} (int8 self-draft)", target.shape, 1)
    return target, _resolve("draft", draft_entry, None)


def _costs(target: Model, draft: Model | None, dep: Deployment, k: int, width: float) -> dict:
    """Modelled ms of each forward a round can contain (draft costs 0 without a draft model)."""

    def cost(model: Model | None, num_gpus: int, tokens: int) -> float:
        if model is None:
            return 0.0
        return forward_ms(model, dep.gpu, num_gpus=num_gpus, tokens=tokens, context=dep.context,
                          batch=dep.batch, efficiency=dep.efficiency)

    return {"ar": cost(target, dep.target_gpus, 1), "verify": cost(target, dep.target_gpus, k + 1),
            "draft_step": cost(draft, dep.draft_gpus, 1), "glue": cost(draft, dep.draft_gpus, k + 1),
            "tree_step": cost(draft, dep.draft_gpus, max(1, round(width)))}


def project_variant(v, target: Model, draft: Model | None, dep: Deployment, *, acceptance: str = "fit",
                    hit_rate: float | None = None, fan_out: float | None = None) -> dict:
    """Modelled round time and tokens/s (per sequence) of one measured `projection.Variant` on `dep`."""
    r = v.all
    k = max(r.k, 1)
    default_width = DEFAULT_FAN_OUT_PER_K * (k + 1)
    width = fan_out or (v.fan_out_total if not math.isnan(v.fan_out_total) else default_width)
    cost = _costs(target, draft, dep, k, width)
    row = {"label": v.label, "ar_ms": cost["ar"]}
    if v.hit is not None:
        return {**row, **_project_ssd(v, cost, k, acceptance, hit_rate), "fan_out_total": width}
    draft_ms = r.mean_proposed * cost["draft_step"]
    round_ms = cost["ar"] if r.mean_proposed == 0 else cost["verify"] + draft_ms
    tokens = r.tokens(acceptance)
    return {**row, "tokens_per_round": tokens, "round_ms": round_ms, "tokens_per_s": 1e3 * tokens / round_ms}


def _project_ssd(v, cost: dict, k: int, acceptance: str, hit_rate: float | None) -> dict:
    """Theorem 7 in ms: a hit waits max(verify, glue + K tree steps); a miss adds the backup."""
    h = v.hit_rate if hit_rate is None else hit_rate
    t_p = cost["glue"] + k * cost["tree_step"]
    backup_drafts = v.miss.mean_proposed if v.miss.rounds else k
    t_b = backup_drafts * cost["draft_step"] if v.backup in (None, "jit") else 0.0
    e_hit = v.hit.tokens(acceptance) if v.hit.rounds else v.all.tokens(acceptance)
    e_miss = v.miss.tokens(acceptance) if v.miss.rounds else v.all.tokens(acceptance)
    per_ms = ssd_speedup(h, e_hit, e_miss, t_p=t_p, t_b=t_b, t_verify=cost["verify"])  # tokens per ms
    tokens = h * e_hit + (1 - h) * e_miss
    return {"tokens_per_round": tokens, "round_ms": tokens / per_ms, "tokens_per_s": 1e3 * per_ms, "hit_rate": h}


def assumed_ssd(v):
    """An SSD variant built from an SD variant, for projection at an assumed hit rate (jit backup)."""
    return dataclasses.replace(v, label=f"ssd (from {v.label}, assumed h)", method="ssd", hit=v.all,
                               miss=v.all, backup="jit", speedup=math.nan, speedup_low=math.nan,
                               speedup_high=math.nan)


def project(measured, target: Model, draft: Model | None, dep: Deployment, *, acceptance: str = "fit",
            hit_rate: float | None = None, fan_out: float | None = None) -> list[dict]:
    """Every measured variant on `dep` (plus an assumed-h SSD when the run has none and
    `hit_rate` is given), with modelled speedup over the modelled ar."""
    variants = list(measured.variants.values())
    if hit_rate is not None and not any(v.hit is not None for v in variants):
        variants += [assumed_ssd(v) for v in variants if v.hit is None and v.all.mean_proposed > 0][:1]
    rows = [project_variant(v, target, draft, dep, acceptance=acceptance, hit_rate=hit_rate, fan_out=fan_out)
            for v in variants]
    for row in rows:
        row.update(hardware=dep.gpu.name, target_gpus=dep.target_gpus, draft_gpus=dep.draft_gpus,
                   speedup_vs_ar=row["tokens_per_s"] * row["ar_ms"] / 1e3,
                   total_tokens_per_s=row["tokens_per_s"] * dep.batch)
    return rows
