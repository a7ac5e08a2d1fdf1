"""How many candidate bonus tokens (branches) to fork per accepted count k = 0..K.

A policy maps (K, whether the row missed last round) to a list F_0..F_K. `auto` fixes no list:
the speculator keeps as many branches as its measured costs fit inside one verify (at most
the budget of uniform 3), and the fork gives them to the likeliest (accepted count, bonus)
outcomes under the acceptance measured in the run's own rounds (forking.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from ssdbench.errors import UsageError


@dataclass(frozen=True)
class FanOut:
    """F_k per accepted count, for rows that hit last round and for rows that missed."""

    after_hit: tuple[int, ...]
    after_miss: tuple[int, ...]
    auto: bool = False  # trim to what fits inside one verify, from measured costs
    description: str = ""

    def for_row(self, *, missed: bool, depth: int) -> list[int]:
        """F_0..F_depth for a proposal of `depth` <= K tokens, indexed by the accepted count k."""
        base = self.after_miss if missed else self.after_hit
        return list(base[: depth + 1])

    @property
    def budget(self) -> int:
        return max(sum(self.after_hit), sum(self.after_miss))


def parse_int_list(text: str, *, flag: str, length: int) -> tuple[int, ...]:
    try:
        values = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise UsageError(f"{flag} must be a comma list of integers, got '{text}'") from None
    if len(values) != length:
        raise UsageError(f"{flag} needs K+1 = {length} entries (one per accepted count 0..K), got {len(values)}")
    if any(v < 0 for v in values) or sum(values) == 0:
        raise UsageError(f"{flag} entries must be >= 0 and not all zero, got '{text}'")
    return values


def uniform(f: int, k: int) -> tuple[int, ...]:
    return (f,) * (k + 1)


def miss_default(after_hit: tuple[int, ...]) -> tuple[int, ...]:
    """After a miss, k = 0 is by far the likeliest outcome: move half the budget there."""
    budget = sum(after_hit)
    first = max(after_hit[0], budget // 2)
    rest = list(after_hit[1:])
    excess = first + sum(rest) - budget
    for i in range(len(rest) - 1, -1, -1):  # take the excess from the deepest entries
        cut = min(excess, max(rest[i] - 1, 0))
        rest[i] -= cut
        excess -= cut
    return (first, *rest)


def build_fan_out(spec: str, *, k: int, fan_out_list: str | None, miss_list: str | None,
                  geometric: tuple[tuple[int, ...], str] | None = None) -> FanOut:
    """From the CLI: `--fan-out F|geometric|auto`, `--fan-out-list`, `--fan-out-miss-list`.

    geometric: (branches per accepted count 0..K, how they were fitted), made by the run plan from
    a previous run (ssdbench.projection.theory.geometric_fan_out).
    """
    auto = spec == "auto"
    if fan_out_list:
        after_hit = parse_int_list(fan_out_list, flag="--fan-out-list", length=k + 1)
        description = f"list {fan_out_list}"
    elif spec == "geometric":
        if geometric is None:
            raise UsageError("--fan-out geometric needs --fit-from RUN (a previous run to fit acceptance from)")
        after_hit, description = tuple(geometric[0]), geometric[1]
    elif auto:
        after_hit = uniform(3, k)
        description = "auto (the likeliest outcomes under the measured acceptance, as many as fit one verify)"
    else:
        try:
            f = int(spec)
        except ValueError:
            raise UsageError(f"--fan-out must be an integer, 'geometric' or 'auto', got '{spec}'") from None
        if f < 1:
            raise UsageError(f"--fan-out must be >= 1, got {f}")
        after_hit = uniform(f, k)
        description = f"uniform {f}"
    after_miss = parse_int_list(miss_list, flag="--fan-out-miss-list", length=k + 1) if miss_list else miss_default(after_hit)
    return FanOut(after_hit=after_hit, after_miss=after_miss, auto=auto, description=description)
