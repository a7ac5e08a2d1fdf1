"""Energy per generated token, from the NVML samples of the `gpu` table joined to each variant's rounds.

A variant's time is the union of its requests' windows (first round start to last round end,
prefill included, as for the end-to-end speedup); the energy is what every sampled GPU used
inside those windows: the driver's cumulative energy counter interpolated at each window's
ends, or, on GPUs without that counter, power integrated over the samples. Time between a
variant's requests (another method decoding, an idle draft process) is not charged to it.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ssdbench.metrics.summary import add_label, own_rounds


def joules_per_token(steps: pd.DataFrame, requests: pd.DataFrame, gpu: pd.DataFrame) -> dict[str, float]:
    """label -> joules per generated token over every sampled GPU (absent: no samples or no rounds; a
    serving engine's reported rounds have no times, so endpoint variants are absent too)."""
    steps = own_rounds(steps)
    if gpu is None or gpu.empty or steps.empty:
        return {}
    counters = {index: _cumulative_joules(group) for index, group in gpu.groupby("device_index")}
    counters = {i: c for i, c in counters.items() if c is not None}
    if not counters:
        return {}
    tokens = add_label(requests).groupby("label")["new_tokens"].sum()
    out = {}
    for label, group in add_label(steps).groupby("label", sort=False):
        windows = _merged(_request_windows(group))  # [(start_ns, end_ns)]
        joules = sum(float(np.interp(end, t, j) - np.interp(start, t, j))
                     for t, j in counters.values() for start, end in windows)
        if tokens.get(label, 0) > 0:
            out[label] = joules / float(tokens[label])
    return out


def _cumulative_joules(samples: pd.DataFrame) -> tuple[np.ndarray, np.ndarray] | None:
    """(sample times ns, joules used since the first sample) of one GPU, or None without usable samples."""
    samples = samples.sort_values("t_ns")
    t = samples["t_ns"].to_numpy(dtype=np.float64)
    if len(t) < 2:
        return None
    energy = samples["energy_mj"].to_numpy(dtype=np.float64)
    if np.isfinite(energy).all():
        return t, (energy - energy[0]) / 1e3
    power = samples["power_w"].to_numpy(dtype=np.float64)
    if not np.isfinite(power).all():
        return None
    steps_j = (power[1:] + power[:-1]) / 2 * np.diff(t) / 1e9  # trapezoids
    return t, np.concatenate(([0.0], np.cumsum(steps_j)))


def _request_windows(steps: pd.DataFrame) -> list[tuple[float, float]]:
    ends = steps["t_start_ns"] + steps["step_ms"] * 1e6
    frame = pd.DataFrame({"request_idx": steps["request_idx"], "start": steps["t_start_ns"], "end": ends})
    spans = frame.groupby("request_idx").agg(start=("start", "min"), end=("end", "max"))
    return list(zip(spans["start"].astype(float), spans["end"].astype(float)))


def _merged(windows: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Overlapping windows (requests of one batch share rounds) joined, so no time counts twice."""
    merged: list[list[float]] = []
    for start, end in sorted(windows):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(a, b) for a, b in merged]
