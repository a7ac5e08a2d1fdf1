"""What a run fits from an earlier run before it is planned: acceptance a and the miss power law r, for
`--fan-out geometric --fit-from RUN`. Fitting reads the earlier run; planning (plan.py) then reads none."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ssdbench.errors import UsageError

DEFAULT_POWER_LAW_R = 0.5  # used when the fitted run has a single fan-out (r cannot be fitted)


@dataclass(frozen=True)
class AcceptanceFit:
    a: float  # per-token acceptance of the run's sd and ssd rounds
    r: float  # 1 - hit(F) ~ F^-r, from its ssd rounds (DEFAULT_POWER_LAW_R where it cannot be fitted)
    source: Path  # the run it was fitted on


def needs_fit(settings) -> bool:
    return settings.fan_out == "geometric"


def fit_for(settings, fits: dict[Path, AcceptanceFit] | None = None) -> AcceptanceFit | None:
    """The fit these settings plan with (None unless --fan-out geometric); `fits` remembers runs already
    fitted (a sweep's points share one)."""
    if not needs_fit(settings):
        return None
    require_fit_from(settings)
    path = Path(settings.fit_from)
    if fits is not None and path in fits:
        return fits[path]
    fit = fit_run(path)
    if fits is not None:
        fits[path] = fit
    return fit


def require_fit_from(settings) -> None:
    if settings.fit_from is None:
        raise UsageError("--fan-out geometric needs --fit-from RUN: a previous sd or ssd run to fit acceptance from")


def fit_run(path: Path) -> AcceptanceFit:
    from ssdbench.projection.theory import fit_acceptance, fit_power_law
    from ssdbench.records.reader import load_run

    steps = load_run(path).steps
    steps = steps[steps["method"].isin(["sd", "ssd"])]
    if steps.empty:
        raise UsageError(f"--fit-from {path}: no sd or ssd rounds to fit acceptance from")
    fitted = fit_power_law(steps[steps["method"] == "ssd"]) if "ssd" in set(steps["method"]) else None
    return AcceptanceFit(a=float(fit_acceptance(steps)), r=float(fitted[0]) if fitted else DEFAULT_POWER_LAW_R,
                         source=path)
