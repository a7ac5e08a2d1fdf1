"""The studies, in the order `reproduce` runs them (geometric fits on what fan-out recorded)."""

from __future__ import annotations

from ssdbench.errors import UsageError
from ssdbench.reproduce import backups, datasets, fan_out, geometric, pareto, saguaro, ssd_vs_sd
from ssdbench.reproduce.study import Study

STUDIES: tuple[Study, ...] = (datasets.STUDY, fan_out.STUDY, geometric.STUDY, saguaro.STUDY, backups.STUDY,
                              pareto.STUDY, ssd_vs_sd.STUDY)
BY_NAME = {s.name: s for s in STUDIES}
NEEDS = {"geometric": ("fan-out",)}  # a study -> the studies whose records it reads


def select(names: list[str]) -> list[Study]:
    """The named studies (all when none) with what they need, in run order; an unknown name is refused."""
    import difflib

    for name in names:
        if name not in BY_NAME:
            close = difflib.get_close_matches(name, list(BY_NAME), n=1)
            hint = f"; did you mean '{close[0]}'?" if close else f"; the studies: {', '.join(BY_NAME)}"
            raise UsageError(f"unknown study '{name}'{hint}")
    wanted = set(names or BY_NAME)
    wanted |= {need for name in list(wanted) for need in NEEDS.get(name, ())}
    return [s for s in STUDIES if s.name in wanted]
