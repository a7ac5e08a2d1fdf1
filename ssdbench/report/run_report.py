"""What `ssdbench run` says about the run it just made, computed once from its records.

The table, JSON and Markdown outputs (report/run_views.py) all render this one object, and the gate
(report/gate.py, `compare --fail-on`) checks two of them, built from recorded runs by `report_of_run`: a
figure or a warning is decided in one place and said once, whatever the format.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ssdbench.metrics.variants import VariantRecords


@dataclass(frozen=True)
class ReportContext:
    """What the report needs of the run's plan (cli/run.py:report_context builds it; the records hold the rest)."""

    max_new_tokens: int
    k: int
    temperature: float
    batch_size: int
    acceptance: str  # exact | synthetic:... (sampling/synthetic.py)
    greedy: bool
    with_ssd: bool
    random_weights: bool
    target_placement: str  # where the target ran, for the MBU line
    warnings: tuple[str, ...] = ()  # what makes the figures not the target's (synthetic acceptance)


@dataclass(frozen=True)
class RunReport:
    run_dir: Path
    title: str
    acceptance: str  # exact | synthetic:... (the plan's)
    greedy: bool
    summary: pd.DataFrame  # one row per variant (metrics/summary.py), with target_mbu and joules_per_token
    ssd: pd.DataFrame | None  # ssd's cache and overlap figures, None without ssd
    chain: dict | None  # ssd's draft chain against a verify (report/ssd_summary.py)
    exactness: str  # the outputs' verdict against ar
    divergences: list[dict] | str | None  # the manifest's greedy_divergences
    prediction: list[dict]  # predicted against measured speedups (projection/)
    notes: tuple[str, ...]  # lines under the table, Rich markup: MBU, kernels, random weights, self-skip
    warnings: tuple[str, ...]  # what makes the figures not the target's (synthetic acceptance): said once
    variants: dict[str, VariantRecords]  # each variant's requests and rounds: what the gate pairs


def build_run_report(context: ReportContext, path: Path, recorder) -> RunReport | None:
    """The report of the run just recorded at `path` (None when no request finished: nothing to summarise)."""
    from ssdbench.records.reader import read_manifest

    return _report(context, Path(path), read_manifest(path), pd.DataFrame(recorder.requests),
                   pd.DataFrame(recorder.steps), pd.DataFrame(recorder.endpoints), pd.DataFrame(recorder.events))


def report_of_run(run) -> RunReport | None:
    """The report of a recorded run (records/reader.py:Run), its context read from its manifest."""
    empty = pd.DataFrame()
    return _report(context_of_manifest(run.manifest), Path(run.path), run.manifest, run.requests, run.steps,
                   empty if run.endpoints is None else run.endpoints, empty if run.events is None else run.events)


def context_of_manifest(manifest: dict) -> ReportContext:
    """What a report needs of a run's plan, as its manifest recorded it (config: the run's options)."""
    config = manifest.get("config", {})
    temperature = float(config.get("temperature") or 0.0)
    return ReportContext(max_new_tokens=int(config.get("max_new_tokens") or 0), k=int(config.get("k") or 0),
                         temperature=temperature, batch_size=int(config.get("batch_size") or 1),
                         acceptance=str(config.get("acceptance") or "exact"), greedy=temperature == 0,
                         with_ssd="ssd" in (config.get("methods") or ()),
                         random_weights=bool(config.get("random_weights")),
                         target_placement=str(config.get("target_device") or config.get("device") or "cpu"))


def _report(context: ReportContext, path: Path, manifest: dict, requests: pd.DataFrame, steps: pd.DataFrame,
            endpoints: pd.DataFrame, events: pd.DataFrame) -> RunReport | None:
    from ssdbench.metrics.energy import joules_per_token
    from ssdbench.metrics.summary import add_label, summarize
    from ssdbench.metrics.variants import split_variants
    from ssdbench.report.bandwidth_use import target_mbu
    from ssdbench.report.render import exactness_line
    from ssdbench.report.ssd_summary import chain_against_verify, ssd_overview

    if requests.empty:
        return None
    summary = summarize(requests, steps)
    if not endpoints.empty:  # serving engines' acceptance, tokens per target pass and identity judged on text
        from ssdbench.endpoints.table import with_endpoint_figures

        summary = with_endpoint_figures(summary, endpoints, requests, steps)
    mbu = target_mbu(requests, weight_bytes=manifest.get("target_weight_bytes_per_forward"),
                     bandwidth_gbs=manifest.get("memory_read_bandwidth_gbs"))
    summary["target_mbu"] = summary["label"].map(mbu).astype(float)
    energy = joules_per_token(steps, requests, _gpu_samples(path))
    if energy:  # GPUs were sampled: joules per generated token, every sampled GPU together
        summary["joules_per_token"] = summary["label"].map(energy).astype(float)
    c = context
    divergences = manifest.get("greedy_divergences")
    title = (f"ssdbench run · {requests['suite'].iloc[0]} · {summary['num_requests'].iloc[0]} requests × "
             f"≤{c.max_new_tokens} new tokens · K={c.k} · T={c.temperature} · batch {c.batch_size}")
    return RunReport(
        run_dir=Path(path), title=title, acceptance=c.acceptance, greedy=c.greedy, summary=summary,
        ssd=ssd_overview(steps) if c.with_ssd else None,
        chain=chain_against_verify(steps, events, c.k) if c.with_ssd else None,
        exactness=exactness_line(summary, greedy=c.greedy, divergences=divergences), divergences=divergences,
        prediction=_prediction_rows(path), notes=tuple(_notes(c, manifest, summary)), warnings=c.warnings,
        variants=split_variants(add_label(requests), add_label(steps)))


def _gpu_samples(path: Path) -> pd.DataFrame:
    """The run's NVML samples (gpu.parquet), empty where none were taken."""
    import pyarrow.parquet as pq

    file = Path(path) / "gpu.parquet"
    return pq.read_table(file).to_pandas() if file.is_file() else pd.DataFrame()


def _prediction_rows(path: Path) -> list[dict]:
    """Predicted (or accounting-checked) speedups beside the measured ones, from the records just written."""
    from ssdbench.projection import check_rows, measure_run
    from ssdbench.records.reader import load_run

    run = load_run(path)
    return check_rows(measure_run(run)) if not run.steps.empty else []


def _notes(context: ReportContext, manifest: dict, summary: pd.DataFrame) -> list[str]:
    notes = _bandwidth_notes(context.target_placement, manifest, summary)
    if manifest.get("kernels"):
        used = "; ".join(f"{role}: {k.get('linear')}, {k.get('attention')}" + _fused_note(k.get("decode_step"))
                         for role, k in manifest["kernels"].items())
        notes.append(f"kernels (probed here): {used}")
    if context.random_weights:
        notes.append("[bold yellow]random weights[/]: published shapes with random weights (--random-weights); the "
                     "timings are the shapes', the outputs and acceptance are no real model's.")
    skip = manifest.get("models", {}).get("draft", {}).get("self_skip")
    if skip:
        notes.append(_self_skip_note(skip))
    return notes


def _bandwidth_notes(placement: str, manifest: dict, summary: pd.DataFrame) -> list[str]:
    if not manifest.get("memory_read_bandwidth_gbs"):
        return []
    spread = manifest.get("memory_read_bandwidth") or {}
    band = f", passes p10-p90 {spread['p10_gbs']:.1f}-{spread['p90_gbs']:.1f}" if "p10_gbs" in spread else ""
    notes = [f"target MBU: target weight bytes per forward × forwards/s ÷ measured read bandwidth "
             f"({manifest['memory_read_bandwidth_gbs']:.1f} GB/s median{band} on {placement})."]
    if (summary["target_mbu"] > 1).any():
        notes.append("MBU above 100%: decoding read the weights faster than the bandwidth probe read memory "
                     "before the run; the machine's bandwidth varies (see the probe's spread), so read MBU "
                     "as approximate here.")
    return notes


def _fused_note(decode_step: str | None) -> str:
    """The kernels line's word on decode_layer.c: every step fused, or only those below a row count."""
    if not decode_step:
        return ""
    return ", fused steps" if decode_step == "fused" else f", fused steps ({decode_step.removeprefix('fused')})"


def _self_skip_note(skip: dict) -> str:
    """Which layers the self-skip draft left out, and (auto) what the calibration expected of them."""
    if "alpha" not in skip:
        return f"self-skip draft: layers {skip['layers']} skipped (given in --draft)."
    line = (f"self-skip draft: layers {skip['layers']} skipped, chosen by calibration on {skip['calibration_tokens']} "
            f"prompt tokens in {skip['seconds']:.1f} s: greedy agreement {skip['alpha']:.2f}, cost "
            f"{skip['cost_ratio']:.2f} of the target, predicted sd speedup {skip['predicted_speedup']:.2f}×")
    if skip["predicted_speedup"] < 1:
        line += " [yellow](below 1: no skip set tried is expected to pay off on this target)[/]"
    return line
