"""Predict and project decoding speed from a run's records (docs/DESIGN.md §7.5).

This module turns one run into the measured inputs of the theory — per-token acceptance,
acceptance length, SSD hit rate, per-round costs — and predicts each variant's speedup
over `ar` on the run's own hardware (`predict`: from costs measured apart from the rounds
predicted), beside the measured speedup. `roofline` projects the same inputs onto other GPUs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ssdbench.projection import predict, theory

GAP_FLAG = 0.15  # predicted vs measured speedups further apart than this are flagged


@dataclass(frozen=True)
class Rounds:
    """Measured acceptance and mean costs (ms per round) of a set of steps rows."""

    rounds: int
    k: int  # most common proposal length
    mean_proposed: float
    a: float  # fitted per-token acceptance (NaN without drafts)
    tokens_model: float  # E from a over the rounds' proposal lengths (modelled)
    acceptance_length: float  # measured: mean emitted per round
    step_ms: float
    draft_ms: float
    wait_ms: float
    verify_ms: float
    tokens_per_position: float  # E = 1 + Σ_i P(first i drafts accepted), measured per position

    @property
    def own_ms(self) -> float:
        """The verifier's own work per round: everything but drafting and waiting."""
        return self.step_ms - self.draft_ms - self.wait_ms

    def tokens(self, acceptance: str) -> float:
        """Tokens per round: modelled from a ('fit') or the measured pooled AL ('pooled')."""
        if acceptance == "pooled" or math.isnan(self.tokens_model):
            return self.acceptance_length
        return self.tokens_model

    def tokens_for_prediction(self, acceptance: str) -> float:
        """E for the prediction: from the fitted a ('fit') or acceptance per position ('pooled')."""
        if acceptance == "pooled" or math.isnan(self.tokens_model):
            return self.tokens_per_position
        return self.tokens_model


@dataclass(frozen=True)
class Variant:
    label: str
    method: str
    all: Rounds
    hit: Rounds | None  # SSD rounds served from the cache (None outside SSD)
    miss: Rounds | None
    fan_out_total: float  # mean branches per sequence (NaN outside SSD)
    backup: str | None
    speedup: float  # measured, paired geometric mean vs ar
    speedup_low: float
    speedup_high: float

    @property
    def hit_rate(self) -> float:
        if self.hit is None:
            return math.nan
        return self.hit.rounds / (self.hit.rounds + self.miss.rounds)


@dataclass(frozen=True)
class Measured:
    path: str
    hardware: str
    batch_size: int
    context_tokens: float  # mean prompt + half the new tokens: the KV length mid-decode
    variants: dict[str, Variant]
    calibration: dict | None = None  # the run's forward-cost calibration (projection.calibrate)
    events: object = None  # the draft process's events (DataFrame), or None
    is_ngram: bool = False  # sd's proposer is n-gram lookup: its drafting costs ~nothing


def _rounds(steps) -> Rounds:
    if steps.empty:
        return Rounds(0, 0, 0.0, *[math.nan] * 8)
    a = theory.fit_acceptance(steps)
    return Rounds(
        rounds=len(steps), k=int(steps["proposed"].mode().iloc[0]),
        mean_proposed=float(steps["proposed"].mean()), a=a,
        tokens_model=theory.mean_expected_tokens(steps, a) if not math.isnan(a) else math.nan,
        acceptance_length=float(steps["emitted"].mean()), step_ms=float(steps["step_ms"].mean()),
        draft_ms=float(steps["draft_ms"].mean()), wait_ms=float(steps["wait_ms"].mean()),
        verify_ms=float(steps["verify_ms"].mean()), tokens_per_position=predict.tokens_per_round(steps),
    )


def _variant(label: str, steps, summary_row) -> Variant:
    cached = steps[steps["cache_hit"].notna()]
    hit = miss = None
    if not cached.empty:
        is_hit = cached["cache_hit"].astype(bool)
        hit, miss = _rounds(cached[is_hit]), _rounds(cached[~is_hit])
    fan_out = steps["fan_out_total"].dropna()
    backups = steps["backup"].dropna()
    return Variant(
        label=label, method=str(steps["method"].iloc[0]), all=_rounds(steps), hit=hit, miss=miss,
        fan_out_total=float(fan_out.astype(float).mean()) if len(fan_out) else math.nan,
        backup=str(backups.mode().iloc[0]) if len(backups) else None,
        speedup=float(summary_row["speedup"]), speedup_low=float(summary_row["speedup_low"]),
        speedup_high=float(summary_row["speedup_high"]),
    )


def describe_hardware(manifest: dict) -> str:
    """The run's device in words: GPU names when it ran on CUDA, else the CPU model."""
    env = manifest.get("environment", {})
    device = str(manifest.get("config", {}).get("device", "cpu"))
    gpus = env.get("gpus") or []
    if device.startswith("cuda") and isinstance(gpus, list) and gpus:
        names = [g.get("name", "GPU") if isinstance(g, dict) else str(g) for g in gpus]
        return f"{device} ({', '.join(names)})"
    cpu = env.get("cpu", {})
    return f"{device} ({cpu.get('model', 'unknown CPU')}, {cpu.get('logical_cores', '?')} cores)"


def measure_run(run) -> Measured:
    """The theory's inputs, per variant with recorded rounds, from a loaded `Run`."""
    from ssdbench.metrics.summary import add_label, own_rounds, summarize

    steps = add_label(own_rounds(run.steps))  # a server's reported rounds have no times to project from
    summary = summarize(run.requests, run.steps).set_index("label")
    variants = {label: _variant(label, group, summary.loc[label])
                for label, group in steps.groupby("label", sort=False) if label in summary.index}
    requests = run.requests[add_label(run.requests)["label"].isin(list(variants))]
    context = float((requests["prompt_tokens"] + requests["new_tokens"] / 2).mean()) if len(requests) else 0.0
    batch = int(run.manifest.get("config", {}).get("batch_size") or steps["batch_size"].max() or 1)
    return Measured(path=str(run.path), hardware=describe_hardware(run.manifest), batch_size=batch,
                    context_tokens=context, variants=variants, calibration=run.manifest.get("calibration"),
                    events=run.events, is_ngram=run.manifest.get("config", {}).get("draft") == "ngram")


def variant_costs(measured: Measured, v: Variant, ar: Variant) -> predict.Costs:
    """Independent costs where the run has them (calibration, draft events), else an accounting check."""
    is_ssd = v.hit is not None
    events = predict.draft_event_costs(measured.events, v.method) if is_ssd else None
    costs = predict.calibrated_costs(measured.calibration, k=v.all.k, is_ngram=measured.is_ngram,
                                     events_costs=events, batch_size=measured.batch_size)
    missing = costs is None or (is_ssd and events is None) or (not is_ssd and math.isnan(costs.draft_step_ms))
    if not missing:
        return costs
    if not is_ssd:
        return predict.Costs(ar.all.step_ms, v.all.own_ms, v.all.draft_ms / v.all.mean_proposed, math.nan, math.nan,
                             predict.ACCOUNTING)
    hit, miss = v.hit, v.miss
    own_ms = hit.step_ms - hit.wait_ms if hit.rounds else v.all.own_ms
    backup = max(0.0, miss.step_ms - own_ms) if miss.rounds else 0.0
    return predict.Costs(ar.all.step_ms, own_ms, math.nan, hit.step_ms if hit.rounds else 0.0, backup,
                         predict.ACCOUNTING)


def predict_speedup(measured: Measured, v: Variant, ar: Variant, *, acceptance: str = "fit") -> tuple[float, str]:
    """(speedup over ar, basis): sd's E·T(1)/(T(K+1)+K·c), ssd's Theorem 7 (see `predict`)."""
    if v.hit is None and v.all.mean_proposed == 0:
        return (1.0, "reference") if v.label == ar.label else (math.nan, "")
    costs = variant_costs(measured, v, ar)
    if v.hit is None:
        return predict.predict_sd(v.all.tokens_for_prediction(acceptance), v.all.mean_proposed, costs), costs.basis
    e_hit = v.hit.tokens_for_prediction(acceptance) if v.hit.rounds else 0.0
    e_miss = v.miss.tokens_for_prediction(acceptance) if v.miss.rounds else 0.0
    return predict.predict_ssd(v.hit_rate, e_hit, e_miss, costs), costs.basis


def check_rows(measured: Measured, *, acceptance: str = "fit") -> list[dict]:
    """Per variant: measured inputs, predicted and measured speedup, their gap, and the prediction's basis."""
    base = measured.variants.get("ar")
    t_ar = base.all.step_ms if base else math.nan
    rows = []
    for v in measured.variants.values():
        predicted, basis = predict_speedup(measured, v, base, acceptance=acceptance) if base else (math.nan, "")
        gap = predicted / v.speedup - 1.0 if v.speedup > 0 else math.nan
        rows.append({
            "label": v.label, "k": v.all.k, "a": v.all.a, "tokens_per_round_model": v.all.tokens_model,
            "acceptance_length": v.all.acceptance_length, "hit_rate": v.hit_rate,
            "round_ms": v.all.step_ms, "round_vs_ar": v.all.step_ms / t_ar,
            "speedup_predicted": predicted, "basis": basis, "speedup_measured": v.speedup,
            "speedup_low": v.speedup_low, "speedup_high": v.speedup_high, "gap": gap,
            "is_flagged": bool(abs(gap) > GAP_FLAG) if not math.isnan(gap) else False,
        })
    return rows
