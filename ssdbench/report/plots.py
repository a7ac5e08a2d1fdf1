"""PNG figures of one or more runs; a figure whose data is absent is skipped with a reason.

Figures are drawn on matplotlib's Agg canvas, chosen per figure inside `make_plots` (no
pyplot, no global backend switch, nothing at import). Variants are named by their label
(`sd`, `sd@hf`), prefixed with the run's name when several runs are plotted together.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Plot:
    name: str  # file stem
    title: str
    path: Path | None  # None: skipped
    reason: str = ""  # why it was skipped


@dataclass(frozen=True)
class Frames:
    """Every run's tables stacked, with `run` and `variant` columns."""

    steps: object
    requests: object
    gpu: object
    num_runs: int
    endpoints: object = None  # requests sent to serving engines (the runs' endpoints tables), or None


def run_names(runs) -> list[str]:
    """Each run's name in legends and headings; a run that stopped early says `(partial)`."""
    names = [Path(run.path).name for run in runs]
    names = names if len(set(names)) == len(names) else [f"{i + 1}:{n}" for i, n in enumerate(names)]
    return [f"{name} (partial)" if run.partial else name for name, run in zip(names, runs)]


def stack_runs(runs) -> Frames:
    import pandas as pd

    from ssdbench.metrics.summary import add_label

    def stacked(table: str, labelled: bool):
        parts = []
        for name, run in zip(run_names(runs), runs):
            frame = getattr(run, table).assign(run=name)
            if labelled:
                frame = add_label(frame)
                frame["variant"] = frame["label"] if len(runs) == 1 else name + "·" + frame["label"]
            parts.append(frame)
        return pd.concat(parts, ignore_index=True)

    sent = [(name, run.endpoints) for name, run in zip(run_names(runs), runs) if run.endpoints is not None]
    endpoints = pd.concat([frame.assign(run=name) for name, frame in sent], ignore_index=True) if sent else None
    return Frames(stacked("steps", True), stacked("requests", True), stacked("gpu", False), len(runs), endpoints)


def _acceptance_hist(fig, d: Frames) -> str | None:
    drafted = d.steps[d.steps["proposed"] > 0]
    if drafted.empty:
        return "no drafted rounds (only ar, or a proposer that never proposed)"
    ax = fig.add_subplot()
    groups = list(drafted.groupby("variant", sort=False)["emitted"])
    width = 0.8 / len(groups)
    for i, (variant, emitted) in enumerate(groups):
        shares = emitted.value_counts(normalize=True).sort_index()
        ax.bar(shares.index + (i - (len(groups) - 1) / 2) * width, shares.to_numpy(), width, label=variant)
    ax.set_xticks(range(1, int(drafted["emitted"].max()) + 1))
    ax.set(xlabel="tokens committed per round (emitted, bonus included)", ylabel="share of rounds")
    ax.legend()
    return None


def _per_position(fig, d: Frames) -> str | None:
    from ssdbench.projection.theory import per_position_acceptance

    drafted = d.steps[d.steps["proposed"] > 0]
    if drafted.empty:
        return "no drafted rounds"
    marginal, conditional = fig.subplots(1, 2, sharey=True)
    for variant, group in drafted.groupby("variant", sort=False):
        table = per_position_acceptance(group)
        marginal.plot(table["position"], table["marginal"], marker="o", label=variant)
        conditional.plot(table["position"], table["conditional"], marker="o", label=variant)
    positions = range(1, int(drafted["proposed"].max()) + 1)
    marginal.set_xticks(positions)
    conditional.set_xticks(positions)
    marginal.set(title="marginal: P(drafts 1..i accepted)", xlabel="draft position i", ylabel="probability", ylim=(0, 1.05))
    conditional.set(title="conditional: P(draft i | 1..i−1 accepted)", xlabel="draft position i")
    marginal.legend()
    return None


def _throughput(fig, d: Frames) -> str | None:
    from ssdbench.metrics.stats import geometric_mean_ci

    rates = d.requests.dropna(subset=["decode_tokens_per_s"])
    if rates.empty:
        return "no request decoded more than one token"
    names, centres, lows, highs = [], [], [], []
    for variant, group in rates.groupby("variant", sort=False):
        ci = geometric_mean_ci(group["decode_tokens_per_s"].to_numpy(dtype=float))
        has_ci = ci.low == ci.low  # NaN with a single request
        names.append(variant)
        centres.append(ci.estimate)
        lows.append(ci.estimate - ci.low if has_ci else 0.0)
        highs.append(ci.high - ci.estimate if has_ci else 0.0)
    ax = fig.add_subplot()
    ax.bar(names, centres, yerr=[lows, highs], capsize=4, color="tab:blue")
    ax.set(ylabel="decode tokens/s per request\n(geometric mean, 95% bootstrap CI)")
    ax.tick_params(axis="x", rotation=30)
    return None


def frontier_points(d: Frames):
    """One point per (run, variant); `series` joins the points a line connects, `load` names what differs
    along it. Methods: total decode tokens/s (emitted / wall time of ssdbench's own rounds, a batch's
    shared round counted once) against per-request decode latency (median TPOT), `load` b=batch size.
    Endpoints, one point per concurrency level (series NAME@endpoint, `load` c=N): decode tokens/s over
    the union of their concurrent requests' decode windows against their median TPOT
    (`pareto.endpoint_throughput_latency`): the same two quantities."""
    import pandas as pd

    from ssdbench.metrics.summary import own_rounds
    from ssdbench.report.pareto import endpoint_throughput_latency

    rows = []
    served = _endpoint_variants(d)
    for (run, label), group in own_rounds(d.steps).groupby(["run", "label"], sort=False):
        if (run, label) in served:
            continue
        rounds = group.drop_duplicates(["t_start_ns", "step_ms"])
        requests = d.requests[(d.requests["run"] == run) & (d.requests["label"] == label)]
        size = int(group["batch_size"].max())
        rows.append({"run": run, "label": label, "series": label, "method": group["method"].iloc[0],
                     "batch_size": size, "concurrency": None, "load": f"b={size}",
                     "total_tokens_per_s": group["emitted"].sum() / (rounds["step_ms"].sum() / 1e3),
                     "latency_ms": float(requests["tpot_ms"].median())})
    for run, requests in d.requests.groupby("run", sort=False):
        sent = None if d.endpoints is None else d.endpoints[d.endpoints["run"] == run]
        for _, point in endpoint_throughput_latency(requests.drop(columns=["label"]), sent).iterrows():
            rows.append({"run": run, "label": point["label"], "series": f"{point['method']}@endpoint",
                         "method": point["method"], "batch_size": None, "concurrency": point["concurrency"],
                         "load": f"c={point['concurrency']}", "total_tokens_per_s": point["total_tokens_per_s"],
                         "latency_ms": point["latency_ms"]})
    return pd.DataFrame(rows, columns=["run", "label", "series", "method", "batch_size", "concurrency", "load",
                                       "total_tokens_per_s", "latency_ms"])


def _endpoint_variants(d: Frames) -> set[tuple[str, str]]:
    """(run, label) of every endpoint variant: their points come from their requests, never from rounds."""
    if d.endpoints is None or d.endpoints.empty:
        return set()
    from ssdbench.metrics.summary import variant_label

    return {(run, variant_label(m, e)) for run, m, e in zip(d.endpoints["run"], d.endpoints["method"], d.endpoints["engine"])}


def pareto_mask(latency, throughput) -> list[bool]:
    """True for points no other point beats on both lower latency and higher throughput."""
    pairs = list(zip(latency, throughput))
    return [not any(l2 <= l1 and t2 >= t1 and (l2, t2) != (l1, t1) for l2, t2 in pairs) for l1, t1 in pairs]


def _frontier(fig, d: Frames) -> str | None:
    points = frontier_points(d).dropna(subset=["total_tokens_per_s", "latency_ms"])
    if points.empty:
        return "no decode rounds and no endpoint request that decoded past its first token"
    if d.num_runs < 2 and points.groupby("series").size().max() < 2:
        return "needs several runs, batch sizes or endpoint concurrency levels (give more than one run, or --concurrency 1,N)"
    ax = fig.add_subplot()
    for series, group in points.groupby("series", sort=False):
        group = group.sort_values("latency_ms")
        is_best = pareto_mask(group["latency_ms"], group["total_tokens_per_s"])
        best, rest = group[is_best], group[[not b for b in is_best]]
        line = ax.plot(best["latency_ms"], best["total_tokens_per_s"], linestyle="--", marker="o", label=series)[0]
        ax.scatter(rest["latency_ms"], rest["total_tokens_per_s"], facecolors="none", edgecolors=line.get_color())
        for _, p in group.iterrows():
            ax.annotate(p["load"], (p["latency_ms"], p["total_tokens_per_s"]), fontsize=7)
    ax.set(xlabel="per-request decode latency: median TPOT (ms/token)",
           ylabel="total decode tokens/s\n(endpoints: over their concurrent requests' decode span)",
           title="filled and dashed: Pareto frontier per method or endpoint; hollow: dominated; b=batch, c=concurrency")
    ax.legend()
    return None


def _gpu(fig, d: Frames) -> str | None:
    if d.gpu.empty:
        return "gpu.parquet has no samples (no NVIDIA GPU telemetry in these runs)"
    util, power = fig.subplots(2, 1, sharex=True)
    for (run, device, role), group in d.gpu.groupby(["run", "device_index", "role"], sort=False):
        seconds = (group["t_ns"] - group["t_ns"].min()) / 1e9
        name = f"{run} gpu{device} ({role})" if d.num_runs > 1 else f"gpu{device} ({role})"
        util.plot(seconds, group["util_pct"], label=name)
        power.plot(seconds, group["power_w"], label=name)
    util.set(ylabel="utilisation %")
    power.set(ylabel="power W", xlabel="seconds since first sample")
    util.legend()
    return None


def _hit_rate(fig, d: Frames) -> str | None:
    import numpy as np

    from ssdbench.projection.theory import fit_power_law, hit_rate_by_fan_out

    ssd = d.steps[d.steps["cache_hit"].notna() & d.steps["fan_out_total"].notna()]
    if ssd.empty:
        return "no SSD rounds with cache hit and fan-out records"
    ax = fig.add_subplot()
    for variant, group in ssd.groupby("variant", sort=False):
        table = hit_rate_by_fan_out(group)
        dots = ax.scatter(table["fan_out_total"], table["hit_rate"], label=variant)
        fit = fit_power_law(group)
        if fit is not None:
            f = np.linspace(max(1, table["fan_out_total"].min()), table["fan_out_total"].max(), 50)
            ax.plot(f, 1 - fit[1] * f ** -fit[0], color=dots.get_facecolor()[0], label=f"{variant} fit r={fit[0]:.2f}")
    ax.set(xlabel="branches per sequence (fan_out_total)", ylabel="cache hit rate", ylim=(0, 1.05))
    ax.legend()
    return None


FIGURES = (
    ("acceptance_length", "Acceptance length per round", _acceptance_hist),
    ("per_position_acceptance", "Per-position acceptance", _per_position),
    ("decode_throughput", "Decode tokens/s per variant", _throughput),
    ("throughput_latency", "Throughput–latency frontier", _frontier),
    ("gpu_telemetry", "GPU utilisation and power", _gpu),
    ("ssd_hit_rate", "SSD hit rate vs fan-out", _hit_rate),
)


def make_plots(runs, out_dir: Path) -> list[Plot]:
    """Draw every figure of FIGURES into `out_dir/<name>.png` (Agg canvas); skipped ones say why."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    frames = stack_runs(runs)
    plots = []
    for name, title, draw in FIGURES:
        fig = Figure(figsize=(9, 4.5), layout="constrained")
        FigureCanvasAgg(fig)
        reason = draw(fig, frames)
        if reason:
            plots.append(Plot(name, title, None, reason))
            continue
        fig.suptitle(title)
        path = Path(out_dir) / f"{name}.png"
        fig.savefig(path, dpi=110)
        plots.append(Plot(name, title, path))
    return plots
