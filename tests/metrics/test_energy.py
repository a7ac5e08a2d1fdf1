"""Energy per generated token (metrics/energy.py): NVML samples joined to each variant's rounds."""

import math

import pandas as pd
import pytest

from ssdbench.metrics.energy import joules_per_token
from ssdbench.report.render import summary_table

S = 1_000_000_000  # ns


def _gpu(watts_by_device: dict[int, float], *, seconds: int = 20, energy_counter: bool = True) -> pd.DataFrame:
    """Samples every 0.5 s of GPUs drawing constant power; the energy counter starts at an arbitrary value."""
    rows = []
    for device, watts in watts_by_device.items():
        for i in range(2 * seconds + 1):
            t = i * S // 2
            rows.append({"t_ns": t, "device_index": device, "role": "target", "util_pct": 50.0, "mem_mib": 1.0,
                         "power_w": watts, "energy_mj": (7e6 + watts * t / 1e6) if energy_counter else None,
                         "sm_clock_mhz": 1.0})
    return pd.DataFrame(rows)


def _rounds(method: str, request_idx: int, start_s: float, end_s: float, rounds: int = 4) -> list[dict]:
    """`rounds` back-to-back rounds filling [start_s, end_s]."""
    length = (end_s - start_s) / rounds
    return [{"method": method, "engine": "native", "request_idx": request_idx,
             "t_start_ns": int((start_s + r * length) * S), "step_ms": length * 1e3} for r in range(rounds)]


def _requests(tokens: dict[tuple[str, int], int]) -> pd.DataFrame:
    return pd.DataFrame([{"method": m, "engine": "native", "request_idx": i, "new_tokens": n}
                         for (m, i), n in tokens.items()])


def test_energy_is_charged_to_the_variant_decoding_at_the_time():
    # ar decodes 0-2 s and 6-8 s (40 tokens); sd decodes 3-4 s (20 tokens); 100 W + 50 W on two GPUs
    steps = pd.DataFrame(_rounds("ar", 0, 0, 2) + _rounds("ar", 1, 6, 8) + _rounds("sd", 0, 3, 4))
    requests = _requests({("ar", 0): 20, ("ar", 1): 20, ("sd", 0): 20})
    got = joules_per_token(steps, requests, _gpu({0: 100.0, 1: 50.0}))
    assert got["ar"] == pytest.approx(150 * 4 / 40)  # 4 s at 150 W over 40 tokens
    assert got["sd"] == pytest.approx(150 * 1 / 20)
    from_power = joules_per_token(steps, requests, _gpu({0: 100.0, 1: 50.0}, energy_counter=False))
    assert from_power == pytest.approx(got)


def test_requests_of_one_batch_share_their_time_once():
    steps = pd.DataFrame(_rounds("ar", 0, 1, 3) + _rounds("ar", 1, 1, 3))  # two rows of one batch
    got = joules_per_token(steps, _requests({("ar", 0): 10, ("ar", 1): 10}), _gpu({0: 100.0}))
    assert got["ar"] == pytest.approx(100 * 2 / 20)


def test_no_samples_no_figure():
    steps = pd.DataFrame(_rounds("ar", 0, 0, 1))
    assert joules_per_token(steps, _requests({("ar", 0): 5}), pd.DataFrame()) == {}
    assert joules_per_token(steps, _requests({("ar", 0): 5}), _gpu({0: 100.0}, seconds=0)) == {}


def test_the_table_shows_joules_per_token_only_when_measured():
    row = {"label": "ar", "num_requests": 1, "new_tokens": 5, "decode_tokens_per_s_median": 1.0, "speedup": 1.0,
           "speedup_low": math.nan, "speedup_high": math.nan, "speedup_e2e": 1.0, "acceptance_length": 1.0,
           "draft_acceptance_rate": math.nan, "ttft_ms_median": 1.0, "tpot_ms_median": 1.0}
    plain = summary_table(pd.DataFrame([row]), title="t")
    with_energy = summary_table(pd.DataFrame([{**row, "joules_per_token": 0.25}]), title="t")
    assert "GPU J/token" not in [c.header for c in plain.columns]
    assert [c.header for c in with_energy.columns][-1] == "GPU J/token"
    assert list(with_energy.columns[-1]._cells) == ["0.250"]


def test_every_gpu_a_run_uses_is_sampled_under_its_role():
    import dataclasses

    from ssdbench.profiling.placement import Placement
    from ssdbench.run.plan import build_plan
    from ssdbench.run.session import gpu_roles
    from ssdbench.run.settings import RunSettings

    plan = build_plan(RunSettings(methods=("ar", "sd", "ssd")))
    assert gpu_roles(plan) == {}  # CPU: nothing to sample

    def on_gpus(plan, tp: int):
        return dataclasses.replace(plan, target_placement=Placement("cuda:0", "cuda:0", None),
                                   draft_placement=Placement(f"cuda:{tp}", f"cuda:{tp}", None),
                                   models=dataclasses.replace(plan.models, tp=tp))

    assert gpu_roles(on_gpus(plan, 1)) == {0: "target+draft", 1: "ssd draft"}
    assert gpu_roles(on_gpus(plan, 2)) == {0: "target rank 0+draft", 1: "target rank 1", 2: "ssd draft"}
