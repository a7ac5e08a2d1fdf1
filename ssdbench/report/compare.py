"""Several runs side by side: fairness of the comparison, then one row per (run, variant).

Runs are aligned on (suite, prompt_id, repeat); a variant's speedup is the paired per-prompt
ratio of its decode tokens/s over the baseline variant's (any run's), summarised by a
geometric mean with a bootstrap interval. DataFrames in, DataFrames out; rendering is in
`report.markdown` and the CLI.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import pandas as pd

from ssdbench.errors import UsageError
from ssdbench.records.reader import Run
from ssdbench.metrics.summary import PAIR_KEYS, add_label, summarize

DEFAULT_BASELINE = "ar"


def _hardware(manifest: dict) -> dict:
    env = manifest.get("environment") or {}
    gpus = (env.get("gpus") or {}).get("devices") or []
    return {"cpu": (env.get("cpu") or {}).get("model"), "gpus": [gpu.get("name") for gpu in gpus]}


# What makes two runs' numbers incomparable: (name, how to read it from a manifest).
# Weights and kernels are keyed by role (target, draft, ssd draft process) and compared on the
# roles both runs have: a role one run lacks belongs to variants only the other measured.
FAIRNESS: tuple[tuple[str, Callable[[dict], object]], ...] = (
    # first, so a refusal names it: synthetic acceptance (--acceptance) times rounds of a made-up
    # acceptance, never to be set beside the real rule
    ("acceptance", lambda m: m.get("acceptance", "exact")),
    ("model weights", lambda m: m.get("model_hashes")),  # per role
    ("dtype", lambda m: (m.get("config") or {}).get("dtype")),
    ("attention backend", lambda m: m.get("attention_backend")),
    ("kernels", lambda m: m.get("kernels")),  # per role: what each ran, as probed (absent in older runs)
    ("hardware", _hardware),
    ("suite content", lambda m: (m.get("suite") or {}).get("sha256")),
)


def _describe(value: object) -> str:
    """Short text for a manifest value: hashes cut to 12 characters, nested dicts flattened."""
    if isinstance(value, dict):
        return ", ".join(f"{k}={_describe(v)}" for k, v in value.items()) or "{}"
    if isinstance(value, list):
        return "[" + ", ".join(_describe(v) for v in value) + "]"
    if isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value):
        return value[:12] + "…"
    return "unknown" if value is None else str(value)


PER_ROLE = frozenset({"model weights", "kernels"})


def shared_roles(first: object, other: object) -> tuple[object, object]:
    """Two role-keyed values cut to the roles both hold (first's order); other values as they are.

    An n-gram run has no draft weights and an `ar,sd` run no ssd draft process: neither is a
    difference in what both runs measured.
    """
    if not (isinstance(first, dict) and isinstance(other, dict)):
        return first, other
    roles = [role for role in first if role in other]
    return {r: first[r] for r in roles}, {r: other[r] for r in roles}


def manifest_differences(runs: Sequence[Run]) -> list[str]:
    """One line per fairness field on which a run differs from run 0; empty when all agree."""
    lines = []
    for index, run in enumerate(runs[1:], start=1):
        for name, read in FAIRNESS:
            first, other = read(runs[0].manifest), read(run.manifest)
            if name in PER_ROLE:
                first, other = shared_roles(first, other)
            if first != other:
                lines.append(f"{name} differs: run 0 has {_describe(first)}; run {index} has {_describe(other)}")
    return lines


def identity_warnings(runs: Sequence[Run]) -> list[str]:
    """Runs given twice (the same directory, or a copy with the same run id), and runs whose
    tables were read unchecked because their manifest lists no file hashes."""
    warnings = []
    for index, run in enumerate(runs):
        for earlier in range(index):
            if _is_same_run(runs[earlier], run):
                warnings.append(f"run {index} is the same run as run {earlier} "
                                f"({run.manifest.get('run_id', run.path)}): it is compared with itself")
                break
        if not isinstance(run.manifest.get("files"), dict):
            warnings.append(f"run {index} ({run.path}) lists no file hashes in its manifest: its tables could "
                            "not be checked against what was recorded")
    return warnings


def _is_same_run(a: Run, b: Run) -> bool:
    run_id = a.manifest.get("run_id")
    return a.path.resolve() == b.path.resolve() or (run_id is not None and run_id == b.manifest.get("run_id"))


# Settings that may legitimately differ between compared runs, but that a reader should know of.
SETTINGS = ("draft", "k", "temperature", "top_p", "draft_temperature", "batch_size", "max_new_tokens", "ignore_eos",
            "seed", "chat_template", "device")


def setting_differences(runs: Sequence[Run]) -> list[str]:
    """Notes for run settings that differ from run 0's (outputs and speeds may differ because of them)."""
    first = runs[0].manifest.get("config") or {}
    notes = []
    for index, run in enumerate(runs[1:], start=1):
        config = run.manifest.get("config") or {}
        changed = [f"{k} {first.get(k)!r} → {config.get(k)!r}" for k in SETTINGS if first.get(k) != config.get(k)]
        if changed:
            notes.append(f"run {index} settings differ from run 0's: {', '.join(changed)}")
    return notes


# Short names for --allow-mismatch-in, one per FAIRNESS field but synthetic acceptance, which
# nothing may set beside the real rule.
FAIRNESS_KEYS = {"weights": "model weights", "dtype": "dtype", "attention": "attention backend",
                 "kernels": "kernels", "hardware": "hardware", "suite": "suite content"}


def parse_allowed(text: str | None) -> frozenset[str]:
    """`hardware,dtype` → the FAIRNESS names they stand for; UsageError, with close names, otherwise."""
    names = [n.strip() for n in (text or "").split(",") if n.strip()]
    for name in names:
        if name not in FAIRNESS_KEYS:
            close = difflib.get_close_matches(name, list(FAIRNESS_KEYS), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise UsageError(f"--allow-mismatch-in: unknown field {name!r}{hint}; fields: {', '.join(FAIRNESS_KEYS)}")
    return frozenset(FAIRNESS_KEYS[n] for n in names)


def check_fairness(runs: Sequence[Run], *, allow_mismatch: bool, allowed: frozenset[str] = frozenset()) -> list[str]:
    """The differences, or a one-line UsageError naming them unless `allow_mismatch` (any field) or
    every differing field is in `allowed` (FAIRNESS names)."""
    differences = manifest_differences(runs)
    refused = [line for line in differences if line.split(" differs")[0] not in allowed]
    if refused and not allow_mismatch:
        differences = refused + [line for line in differences if line not in refused]
        fields = sorted({line.split(" differs")[0] for line in refused})
        raise UsageError(f"refusing an unfair comparison: the runs differ in {', '.join(fields)} "
                         f"({differences[0]}); pass --allow-mismatch to compare anyway")
    return differences


def endpoint_notes(runs: Sequence[Run]) -> list[str]:
    """Runs with serving endpoints: their weights, dtype and kernels are the server's, which the fairness
    fields (read from ssdbench's own target) do not describe; a reader pairing them with native variants
    should know what each server said it served."""
    notes = []
    for index, run in enumerate(runs):
        served = ((run.manifest.get("endpoints") or {}).get("endpoints") or {})
        if not isinstance(served, dict) or not served:
            continue
        described = ", ".join(f"{name}: {info.get('kind', '?')} serving {info.get('model_reported', '?')}"
                              for name, info in served.items() if isinstance(info, dict))
        notes.append(f"run {index}'s endpoint variants ran on serving engines ({described}): their weights, dtype "
                     "and kernels are the server's, not those the fairness check compares")
    return notes


@dataclass
class Comparison:
    runs: list[Run]
    baseline: str | None  # "RUN:label", or None when there is no baseline variant
    rows: pd.DataFrame
    mismatches: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # runs given twice, tables that could not be checked


def _labelled(runs: Sequence[Run], table: str) -> pd.DataFrame:
    frames = []
    for index, run in enumerate(runs):
        frame = add_label(getattr(run, table))
        frame["variant"] = frame["label"]
        frame["run"] = index
        frame["label"] = f"{index}:" + frame["label"]
        frames.append(frame)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def resolve_baseline(labels: Sequence[str], spec: str | None) -> str | None:
    """`RUN:label` for a spec `RUN:label` or `label` (the first run holding it).

    None when no spec was given and no run has `ar`; UsageError, with close names, when a
    given spec matches nothing.
    """
    text = (spec or DEFAULT_BASELINE).strip()
    prefix, _, label = text.rpartition(":")
    if prefix.isdigit() and f"{int(prefix)}:{label}" in labels:
        return f"{int(prefix)}:{label}"
    if not prefix:
        for known in labels:
            if known.split(":", 1)[1] == text:
                return known
    if spec is None:
        return None
    close = difflib.get_close_matches(text, list(labels) + [k.split(":", 1)[1] for k in labels], n=3, cutoff=0.5)
    hint = f"did you mean {' or '.join(repr(c) for c in dict.fromkeys(close))}? " if close else ""
    raise UsageError(f"--baseline-variant {spec!r} matches no variant: {hint}variants (RUN:label): {', '.join(labels)}")


def _is_greedy(requests: pd.DataFrame) -> bool:
    return bool(len(requests)) and bool((requests["temperature"] == 0).all())


def _mark_sampled(rows: pd.DataFrame, requests: pd.DataFrame, baseline: str | None) -> pd.DataFrame:
    """Outputs are compared only where the variant and the baseline both decoded greedily."""
    base_greedy = baseline is not None and _is_greedy(requests[requests["label"] == baseline])
    greedy = {label: _is_greedy(group) for label, group in requests.groupby("label")}
    rows["is_greedy"] = rows["label"].map(greedy).astype(bool)
    rows["outputs_match"] = rows["outputs_match"].astype(object)
    rows.loc[~(rows["is_greedy"] & base_greedy), "outputs_match"] = None
    rows.loc[rows["acceptance"] != "exact", "outputs_match"] = None
    return rows


def _unpaired_note(requests: pd.DataFrame, label: str, base: str) -> str:
    """Why a variant has no speedup: no prompt in common, or no decode time on the common ones."""
    common = requests[requests["label"] == label].merge(requests[requests["label"] == base][PAIR_KEYS], on=PAIR_KEYS)
    if common.empty:
        return f"{label}: no prompts in common with the baseline {base}"
    return (f"{label}: no speedup: its {len(common)} request(s) in common with {base} have no decode time "
            "in one of the two (each ended at its first token)")


def compare_runs(runs: Sequence[Run], *, baseline: str | None = None, allow_mismatch: bool = False,
                 allowed: frozenset[str] = frozenset()) -> Comparison:
    """Per (run, variant): throughput, paired speedup vs `baseline`, acceptance, latency, outputs."""
    mismatches = check_fairness(runs, allow_mismatch=allow_mismatch, allowed=allowed)
    requests, steps = _labelled(runs, "requests"), _labelled(runs, "steps")
    labels = list(dict.fromkeys(requests["label"])) if len(requests) else []
    base = resolve_baseline(labels, baseline)
    notes = (setting_differences(runs) + endpoint_notes(runs)) if runs else []
    notes += [] if base else [f"no '{DEFAULT_BASELINE}' variant in any run: no speedups (choose one with "
                             "--baseline-variant)"]
    rows = summarize(requests, steps, baseline=base or "") if labels else pd.DataFrame()
    if len(rows):
        first = requests.drop_duplicates("label").set_index("label")
        rows.insert(0, "run", rows["label"].map(first["run"]).astype(int))
        rows.insert(1, "variant", rows["label"].map(first["variant"]))
        rows = _mark_sampled(rows, requests, base)
        if base:
            unpaired = rows.loc[rows["speedup_pairs"] == 0, "label"]
            notes += [_unpaired_note(requests, label, base) for label in unpaired]
    return Comparison(list(runs), base, rows, mismatches, notes, identity_warnings(runs))


def paired(frames: Sequence[pd.DataFrame], column: str) -> pd.DataFrame:
    """Inner join of several request frames on (suite, prompt_id, repeat): `column` as c0, c1, ..."""
    joined = None
    for i, frame in enumerate(frames):
        part = frame[PAIR_KEYS + [column]].rename(columns={column: f"c{i}"})
        joined = part if joined is None else joined.merge(part, on=PAIR_KEYS)
    return joined
