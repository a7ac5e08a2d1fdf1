"""CI gating: `--fail-on METRIC:THRESHOLD,...` checked for a candidate run against a baseline run.

Timed metrics are decided on the paired per-prompt ratio candidate/baseline: its geometric
mean and bootstrap interval. A check fails only when the whole interval lies beyond the
threshold, so noise alone never fails a build. Metrics that are deterministic at a fixed
seed (acceptance, outputs) are compared exactly; with differing seeds under sampling they
fall back to a bootstrap over paired requests. Too few pairs to tell: "insufficient data".
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ssdbench.errors import UsageError
from ssdbench.metrics import catalog
from ssdbench.metrics.stats import geometric_mean_ci
from ssdbench.metrics.summary import acceptance_of
from ssdbench.metrics.variants import PAIR_KEYS
from ssdbench.report.compare import paired
from ssdbench.report.run_report import RunReport

PASS, FAIL, INSUFFICIENT, NOISE, NOT_APPLICABLE = "pass", "FAIL", "insufficient data", "pass (within noise)", "n/a"
MIN_PAIRS = 5


@dataclass(frozen=True)
class Metric:
    name: str
    kind: str  # "timed": paired ratio + bootstrap; "pooled": Σnum/Σden, exact at a fixed seed; "outputs"
    is_higher_better: bool = True
    num: str = ""  # pooled metrics: per-round counts summed over the paired requests (metrics/variants.py)
    den: str = ""


def gated_metrics() -> dict[str, Metric]:
    """The metrics --fail-on knows: metrics/catalog.py's gated figures, read at call time."""
    return {f.name: Metric(f.name, f.gate, f.is_higher_better, f.num, f.den) for f in catalog.gated()}


_PERCENT = re.compile(r"([+-]?)(\d+(?:\.\d+)?)%")


@dataclass(frozen=True)
class Check:
    metric: Metric
    limit: float | None  # allowed ratio candidate/baseline (0.95 for -5%); None: exact / outputs
    text: str


@dataclass(frozen=True)
class Verdict:
    check: str
    run: int
    variant: str
    status: str
    detail: str


def _parse_threshold(metric: Metric, threshold: str, text: str) -> float | None:
    if metric.kind == "outputs":
        if threshold.lower() != "false":
            raise UsageError(f"--fail-on {text!r}: outputs_match takes only 'false' (fail when outputs differ)")
        return None
    if threshold.lower() == "exact":
        if metric.kind != "pooled":
            raise UsageError(f"--fail-on {text!r}: 'exact' is for deterministic metrics; {metric.name} is "
                             "timed: give a percentage like -5%")
        return None
    match = _PERCENT.fullmatch(threshold)
    if not match:
        raise UsageError(f"--fail-on {text!r}: malformed threshold {threshold!r}; write a percentage like "
                         f"{'-' if metric.is_higher_better else '+'}5%{' or exact' if metric.kind == 'pooled' else ''}")
    bad_sign = "+" if metric.is_higher_better else "-"
    if match.group(1) == bad_sign:
        direction = "a drop" if metric.is_higher_better else "a rise"
        raise UsageError(f"--fail-on {text!r}: a regression of {metric.name} is {direction}; write "
                         f"{'-' if metric.is_higher_better else '+'}{match.group(2)}%")
    size = float(match.group(2)) / 100
    return 1 - size if metric.is_higher_better else 1 + size


def parse_fail_on(text: str) -> list[Check]:
    """`METRIC:THRESHOLD[,...]` → checks; UsageError (close names suggested) for anything malformed."""
    known, checks = gated_metrics(), []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        name, sep, threshold = part.partition(":")
        name = name.strip()
        if name not in known:
            close = difflib.get_close_matches(name, list(known), n=2, cutoff=0.5)
            hint = f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
            raise UsageError(f"--fail-on: unknown metric {name!r}: {hint}metrics: {', '.join(known)}")
        if not sep or not threshold.strip():
            raise UsageError(f"--fail-on {part!r}: missing threshold; write METRIC:THRESHOLD, e.g. {name}:"
                             f"{'false' if name == 'outputs_match' else '-5%'}")
        checks.append(Check(known[name], _parse_threshold(known[name], threshold.strip(), part), part))
    if not checks:
        raise UsageError("--fail-on is empty; write METRIC:THRESHOLD[,...], e.g. decode_tokens_per_s:-5%")
    return _one_rule_per_metric(checks)


def _one_rule_per_metric(checks: list[Check]) -> list[Check]:
    """A metric given twice with the same rule is checked once; with two rules the gate could not say
    which one it applied, so that is refused."""
    kept: dict[str, Check] = {}
    for check in checks:
        first = kept.setdefault(check.metric.name, check)
        if first.limit != check.limit:
            raise UsageError(f"--fail-on gives {check.metric.name} two rules, {first.text!r} and {check.text!r}; "
                             "keep one")
    return list(kept.values())


def _ratio_ci(num_b: np.ndarray, den_b: np.ndarray, num_c: np.ndarray, den_c: np.ndarray,
              *, num_resamples: int = 2000) -> tuple[float, float, float]:
    """Pooled ratio (Σnum_c/Σden_c)/(Σnum_b/Σden_b) with a bootstrap interval over paired requests."""
    picks = np.random.default_rng(0).integers(0, len(num_b), size=(num_resamples, len(num_b)))
    with np.errstate(invalid="ignore", divide="ignore"):
        ratios = (num_c[picks].sum(1) / den_c[picks].sum(1)) / (num_b[picks].sum(1) / den_b[picks].sum(1))
        estimate = (num_c.sum() / den_c.sum()) / (num_b.sum() / den_b.sum())
    ratios = ratios[np.isfinite(ratios)]
    low, high = np.quantile(ratios, [0.025, 0.975]) if ratios.size else (np.nan, np.nan)
    return float(estimate), float(low), float(high)


def _interval_verdict(check: Check, estimate: float, low: float, high: float, n: int, *, min_pairs: int) -> tuple[str, str]:
    limit = 1.0 if check.limit is None else check.limit  # "exact" on a metric that is random here: no change
    numbers = f"×{estimate:.3f} [95% CI {low:.3f}–{high:.3f}] over {n} pairs, limit ×{limit:.3f}"
    if n < min_pairs or not np.isfinite([estimate, low, high]).all():
        return INSUFFICIENT, f"{numbers}: fewer than {min_pairs} usable pairs, cannot tell a regression from noise"
    beyond = (lambda x: x < limit) if check.metric.is_higher_better else (lambda x: x > limit)
    if beyond(low) and beyond(high):
        return FAIL, f"{numbers}: the whole interval is beyond the limit"
    return (NOISE if beyond(estimate) else PASS), numbers


def _check_timed(check: Check, base: dict, cand: dict, label: str, *, min_pairs: int) -> tuple[str, str] | None:
    if check.metric.name != "speedup":
        pairs = paired([base[label].requests, cand[label].requests], check.metric.name)
        ratio = pairs["c1"] / pairs["c0"]
    elif label == "ar" or "ar" not in base or "ar" not in cand:
        return None
    else:
        col = "decode_tokens_per_s"
        pairs = paired([base[label].requests, base["ar"].requests, cand[label].requests, cand["ar"].requests], col)
        ratio = (pairs["c2"] / pairs["c3"]) / (pairs["c0"] / pairs["c1"])
    interval = geometric_mean_ci(pd.to_numeric(ratio, errors="coerce").to_numpy(dtype=float))
    return _interval_verdict(check, interval.estimate, interval.low, interval.high, interval.n, min_pairs=min_pairs)


def _check_pooled(check: Check, base: dict, cand: dict, label: str, *, min_pairs: int) -> tuple[str, str] | None:
    pairs = base[label].counts_per_request().merge(cand[label].counts_per_request(), on=PAIR_KEYS, suffixes=("_b", "_c"))
    metric = check.metric
    if pairs.empty:
        return INSUFFICIENT, "no paired requests"
    if pairs[metric.den + "_b"].sum() == 0 or pairs["proposed_b"].sum() == 0:
        return None  # not a speculative variant (or no ssd hit flags): nothing to check
    num_b, den_b, num_c, den_c = (pairs[f"{col}_{side}"].to_numpy(float)
                                  for side in "bc" for col in (metric.num, metric.den))
    same_temperature = (pairs["temperature_b"] == pairs["temperature_c"]).all()
    is_fixed = same_temperature and ((pairs["temperature_b"] == 0).all() or (pairs["seed_b"] == pairs["seed_c"]).all())
    if not is_fixed:
        return _interval_verdict(check, *_ratio_ci(num_b, den_b, num_c, den_c), len(pairs), min_pairs=min_pairs)
    old = num_b.sum() / den_b.sum()
    new = num_c.sum() / den_c.sum() if den_c.sum() else float("nan")
    numbers = f"{old:.4f} → {new:.4f} ({new / old - 1:+.2%}) over {len(pairs)} paired requests at fixed seeds"
    if check.limit is None:
        return (PASS, f"{numbers}, exact") if new == old else (FAIL, f"{numbers}: exact match required")
    is_ok = new >= old * check.limit if metric.is_higher_better else new <= old * check.limit
    limit = f"limit {check.limit - 1:+.0%}"
    return (PASS, f"{numbers}, {limit}") if is_ok else (FAIL, f"{numbers}: beyond the {limit}")


def _check_outputs(check: Check, base: dict, cand: dict, label: str, *, min_pairs: int) -> tuple[str, str] | None:
    """Greedy: the candidate's outputs equal the baseline's for this variant, and its own ar's."""
    synthetic = {acceptance_of(side[label].steps) for side in (base, cand)} - {"exact"}
    if synthetic:  # refused, not marked n/a: a gate that silently skips its exactness check would pass
        raise UsageError(f"--fail-on {check.text}: {label} ran with synthetic acceptance "
                         f"({', '.join(sorted(synthetic))}): its outputs are not the target's, so there is no "
                         "exactness to gate; drop outputs_match or gate an exact run")
    if not ((base[label].requests["temperature"] == 0).all() and (cand[label].requests["temperature"] == 0).all()):
        return NOT_APPLICABLE, "sampled: outputs differ by design (exactness under sampling is tested, not gated)"
    references = [(f"the baseline's {label}", base[label].requests)]
    if label != "ar" and "ar" in cand:
        references.append(("this run's ar", cand["ar"].requests))
    counts = []
    for name, reference in references:
        pairs = paired([reference, cand[label].requests], "output_token_ids")
        same = sum(list(a) == list(b) for a, b in zip(pairs["c0"], pairs["c1"]))
        counts.append((name, same, len(pairs)))
    text = "; ".join(f"{same}/{n} identical to {name}" for name, same, n in counts)
    if any(n == 0 for _, _, n in counts):
        return INSUFFICIENT, f"{text}: no paired requests"
    return (PASS, text) if all(same == n for _, same, n in counts) else (FAIL, text)


_CHECKERS = {"timed": _check_timed, "pooled": _check_pooled, "outputs": _check_outputs}


def evaluate(baseline: RunReport, candidate: RunReport, checks: list[Check], *, run: int = 1,
             min_pairs: int = MIN_PAIRS) -> list[Verdict]:
    """Each check for each variant the two runs' reports share; variants missing from the candidate are flagged."""
    base, cand = baseline.variants, candidate.variants
    verdicts = [Verdict("variants", run, label, INSUFFICIENT, f"{label} is in the baseline but not in run {run}")
                for label in base if label not in cand]
    for check in checks:
        found = [Verdict(check.text, run, label, *outcome) for label in base if label in cand
                 if (outcome := _CHECKERS[check.metric.kind](check, base, cand, label, min_pairs=min_pairs))]
        verdicts += found or [Verdict(check.text, run, "–", NOT_APPLICABLE, "no shared variant this metric applies "
                                      "to (e.g. no drafts proposed, no ssd rounds)")]
    return verdicts


def exit_code(verdicts: list[Verdict], *, is_strict: bool = False) -> int:
    """1 when a check failed (or, with `is_strict`, could not be decided); else 0."""
    if any(v.status == FAIL for v in verdicts):
        return 1
    return 1 if is_strict and any(v.status == INSUFFICIENT for v in verdicts) else 0


def headline(verdicts: list[Verdict], *, is_strict: bool = False) -> str:
    failed = sum(v.status == FAIL for v in verdicts)
    unknown = sum(v.status == INSUFFICIENT for v in verdicts)
    if failed:
        return f"GATE FAILED: {failed} of {len(verdicts)} checks regressed beyond their thresholds"
    if unknown:
        outcome = "GATE FAILED (--strict)" if is_strict else "gate passed"
        return (f"{outcome}, but INSUFFICIENT DATA for {unknown} of {len(verdicts)} checks: regressions there "
                "cannot be ruled out (add prompts or repeats)")
    return f"gate passed: all {len(verdicts)} checks hold"
