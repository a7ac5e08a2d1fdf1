"""`--fan-out auto`'s choice between building a tree while the target verifies and not doing so.

Building concurrently only pays where the draft's work does not slow verification. Where it
does (cores sharing one memory bus: on this project's CPU machines a second core streaming
memory makes the target's forward ~2x slower), or where a tree cannot grow deep within one
verify, drafting synchronously on each request and idling during verification can be
faster: SD with the draft on its own core. The chooser measures both: it alternates
short probe blocks, then keeps the mode with more tokens per second of round time, and
probes the other again from time to time because conditions (context length, batch) move.
"""

from __future__ import annotations

from dataclasses import dataclass, field

MODES = ("tree", "sync")
PROBE_ROUNDS = 6  # rounds per probe block (the first one after a switch is not counted)
REPROBE_EVERY = 64  # rounds in the chosen mode between probes of the other


@dataclass
class ModeChooser:
    mode: str = "tree"
    _tokens: dict[str, float] = field(default_factory=lambda: {m: 0.0 for m in MODES})
    _ms: dict[str, float] = field(default_factory=lambda: {m: 0.0 for m in MODES})
    _rounds_in_mode: int = 0
    _probing: bool = True
    _probed: set[str] = field(default_factory=set)

    def rate(self, mode: str) -> float:
        return self._tokens[mode] / self._ms[mode] if self._ms[mode] else 0.0

    def note(self, tokens: int, period_ms: float) -> None:
        """One round's committed tokens (all rows) and its period, credited to the current mode."""
        self._rounds_in_mode += 1
        if self._rounds_in_mode > 1:  # the round after a switch straddles both modes
            decay = 0.9  # older rounds count less, so the choice follows the run
            self._tokens[self.mode] = decay * self._tokens[self.mode] + tokens
            self._ms[self.mode] = decay * self._ms[self.mode] + period_ms
        self._advance()

    def _advance(self) -> None:
        other = MODES[1 - MODES.index(self.mode)]
        if self._probing and self._rounds_in_mode >= PROBE_ROUNDS:
            self._probed.add(self.mode)
            if other not in self._probed:
                self._switch(other)
                return
            self._probing = False
            self._switch(max(MODES, key=self.rate))
        elif not self._probing and self._rounds_in_mode >= REPROBE_EVERY:
            self._probing, self._probed = True, {self.mode}
            self._switch(other)

    def _switch(self, mode: str) -> None:
        if mode != self.mode:
            self.mode, self._rounds_in_mode = mode, 0
        else:
            self._rounds_in_mode = 0

    def describe(self) -> dict:
        return {"mode": self.mode, "tokens_per_s": {m: 1000 * self.rate(m) for m in MODES}}
