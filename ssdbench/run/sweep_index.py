"""A sweep's `index.json`: its base settings and every point measured into its folder.

Re-running a sweep into the same folder resumes it only when every setting that is not an
axis matches what the index recorded; the recorded base settings are never rewritten, and
points of an earlier grid that this one leaves out stay indexed (their folders are records).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from ssdbench.errors import RunDirectoryError, UsageError
from ssdbench.records import strict_json
from ssdbench.run.settings import RunSettings

INDEX_NAME = "index.json"
ENTRY_KEYS = ("name", "run_dir", "status")  # an index entry's keys besides its point's settings


@dataclass(frozen=True)
class SweepIndex:
    """What the index keeps across resumes: the first run's base settings, and its points outside this grid."""

    base_config: dict
    earlier: tuple[dict, ...] = ()
    shard: dict | None = None  # `sweep --shard I/N`: which slice of which grid, run by which code (sweep_shard.py)


def as_json(value):
    """`value` as it reads back from index.json (tuples as lists, paths as text)."""
    return json.loads(strict_json.dumps(value, default=str))


def read_index(sweep_dir: Path) -> dict | None:
    """The recorded index, or None for a new sweep; one line for an index that cannot be read."""
    path = sweep_dir / INDEX_NAME
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise RunDirectoryError(f"{path} is unreadable ({type(err).__name__}); move it away to start a new sweep") from None
    if not isinstance(data, dict) or not isinstance(data.get("base_config"), dict) \
            or not isinstance(data.get("points"), list):
        raise RunDirectoryError(f"{path} is not an ssdbench sweep index (no base_config or points)")
    return data


def point_fields(entry: dict) -> set[str]:
    """The settings an index entry (or a new point's values) sets: the sweep's axes and the always-named ones."""
    return set(entry) - set(ENTRY_KEYS)


def open_index(sweep_dir: Path, base: RunSettings, new_points: list[dict], *, shard: dict | None = None) -> SweepIndex:
    """The index to write for this grid (points as field -> value): a new one, or the recorded one when
    this run resumes it. Refused (one line) when a setting other than an axis differs from the record,
    or the folder holds another slice (shard) than this run's."""
    recorded = read_index(sweep_dir)
    if recorded is None:
        return SweepIndex(base_config=as_json(base.to_dict()), shard=shard)
    _check_same_shard(sweep_dir, recorded.get("shard"), shard)
    earlier = [e for e in recorded["points"] if isinstance(e, dict) and "name" in e]
    new_fields = set().union(*(point_fields(p) for p in new_points))
    old_fields = set().union(*(point_fields(e) for e in earlier)) if earlier else new_fields
    if old_fields != new_fields:
        raise UsageError(f"--out {sweep_dir} holds a sweep over other axes (recorded: {_names(old_fields)}; "
                         f"now: {_names(new_fields)}); give a new --out for this grid")
    differ = _differing_settings(recorded["base_config"], as_json(base.to_dict()), skip=new_fields)
    if differ:
        raise UsageError(f"--out {sweep_dir} holds a sweep made with other settings: {'; '.join(differ)}; resume "
                         "with the recorded settings or give a new --out")
    return SweepIndex(base_config=recorded["base_config"], earlier=tuple(earlier), shard=recorded.get("shard"))


def _check_same_shard(sweep_dir: Path, recorded: dict | None, now: dict | None) -> None:
    def slice_of(shard: dict | None) -> str:
        return "the whole grid" if shard is None else f"shard {shard.get('index')}/{shard.get('count')}"

    if (recorded is None) != (now is None) or (now is not None and any(
            recorded.get(key) != now.get(key) for key in ("index", "count", "grid"))):
        same_slice = slice_of(recorded) == slice_of(now)
        raise UsageError(f"--out {sweep_dir} holds {slice_of(recorded)}{' of another grid' if same_slice else ''}, "
                         f"not {slice_of(now)}; give each shard (or whole sweep) a folder of its own")
    if now is not None and recorded.get("code") != now.get("code"):  # merge trusts one code per shard
        raise UsageError(f"--out {sweep_dir} holds {slice_of(recorded)} run by another version of ssdbench "
                         f"({recorded.get('code')}); resume it with that version or give a new --out")


def _names(fields: set[str]) -> str:
    return ", ".join(sorted(fields)) or "none"


def _differing_settings(recorded: dict, now: dict, *, skip: set[str]) -> list[str]:
    """`field recorded X, now Y` for each setting (axes skipped) whose value changed."""
    missing = object()
    lines = []
    for field in sorted(set(recorded) | set(now)):
        old, new = recorded.get(field, missing), now.get(field, missing)
        if field in skip or old == new:
            continue
        lines.append(f"{field} recorded {_shown(old, missing)}, now {_shown(new, missing)}")
    return lines


def _shown(value, missing) -> str:
    return "(absent)" if value is missing else json.dumps(value)


def write_index(sweep_dir: Path, index: SweepIndex, entries: list[dict], statuses: dict[str, str]) -> None:
    """index.json (atomically): this grid's entries with their statuses, then earlier points it leaves out."""
    names = {e["name"] for e in entries}
    points = [{**e, "status": statuses.get(e["name"], "pending")} for e in entries]
    points += [{**e, "status": statuses.get(e["name"], e.get("status"))} for e in index.earlier if e["name"] not in names]
    data = {"base_config": index.base_config, "points": points, **({"shard": index.shard} if index.shard else {})}
    tmp = sweep_dir / f".{INDEX_NAME}.tmp"
    tmp.write_text(strict_json.dumps(data, indent=2))
    os.replace(tmp, sweep_dir / INDEX_NAME)
