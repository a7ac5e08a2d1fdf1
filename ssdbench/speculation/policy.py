"""ssd's settings for one run, resolved once by the run plan (docs/DESIGN.md §5)."""

from __future__ import annotations

from dataclasses import dataclass

from ssdbench.speculation.fan_out import FanOut

DEFAULT_ROUND_TIMEOUT_S = 120.0  # an ssd round takes milliseconds to seconds; minutes means the draft hung


@dataclass(frozen=True)
class SsdPolicy:
    fan_out: FanOut
    backup: str = "jit"  # jit | fast | auto
    saguaro_c: float = 1.0
    round_timeout_s: float = DEFAULT_ROUND_TIMEOUT_S

    def describe(self) -> dict:
        return {"fan_out": self.fan_out.description, "after_hit": list(self.fan_out.after_hit),
                "after_miss": list(self.fan_out.after_miss), "backup": self.backup, "saguaro_c": self.saguaro_c,
                "round_timeout_s": self.round_timeout_s}
