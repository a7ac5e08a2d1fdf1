"""summary.md and summary.json of a ci/gpu_check.sh run, from what its steps left in WORK.

WORK holds steps.tsv (name, status, seconds, note per line), notes.txt, env.json, tests-*.xml
(pytest's JUnit files) and runs/NAME.json, .cmd, .err (each benchmark's `--format json` output,
command line and stderr). Standard library only.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from gpu_check import read_junit

PASSING = {"pass", "not selected"}
COLUMNS = (  # (header, summary key, format)
    ("method", "label", "{}"), ("engine", "engine", "{}"), ("requests", "num_requests", "{}"),
    ("new tokens", "new_tokens", "{}"), ("decode tok/s", "decode_tokens_per_s_median", "{:.1f}"),
    ("speedup", "speedup", "{:.2f}"), ("e2e speedup", "speedup_e2e", "{:.2f}"),
    ("acceptance length", "acceptance_length", "{:.2f}"), ("draft acceptance", "draft_acceptance_rate", "{:.2f}"),
    ("outputs match", "outputs_match", "{:.0%}"), ("TTFT ms", "ttft_ms_median", "{:.1f}"),
    ("TPOT ms", "tpot_ms_median", "{:.2f}"),
)


def read_steps(work: Path) -> list[dict]:
    path = work / "steps.tsv"
    rows = [line.split("\t") for line in path.read_text().splitlines() if line] if path.is_file() else []
    return [{"name": r[0], "status": r[1], "seconds": int(r[2]), "note": r[3] if len(r) > 3 else ""} for r in rows]


def read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def cell(row: dict, key: str, form: str) -> str:
    value = row.get(key)
    if value is None:
        return "-"
    if key == "speedup" and row.get("speedup_low") is not None and row["label"] != "ar":
        return f"{value:.2f} [{row['speedup_low']:.2f}, {row['speedup_high']:.2f}]"
    try:
        return form.format(value)
    except (ValueError, TypeError):
        return str(value)


def run_table(summary: list[dict]) -> list[str]:
    lines = ["| " + " | ".join(h for h, _, _ in COLUMNS) + " |", "|" + " --- |" * len(COLUMNS)]
    lines += ["| " + " | ".join(cell(row, key, form) for _, key, form in COLUMNS) + " |" for row in summary]
    return lines


def machine_lines(env: dict | None) -> list[str]:
    if not env:
        return ["(the set-up step wrote no environment)"]
    gpus = ", ".join(f"{g['name']} ({g['memory_gib']} GiB, sm {g['capability']})" for g in env.get("gpus", []))
    return [f"- GPU: {gpus or 'none seen by torch'}",
            f"- torch {env.get('torch')} (CUDA {env.get('torch_cuda')}), CUDA available: {env.get('cuda_available')}, "
            f"bf16: {env.get('bf16_supported')}",
            f"- Python {env.get('python')} at {env.get('executable')}"]


def test_lines(work: Path) -> tuple[list[str], dict]:
    lines, counts = [], {}
    for xml in sorted(work.glob("tests-*.xml")):
        part = xml.stem[len("tests-"):]
        counts[part] = read_junit(xml)
        c = counts[part]
        if not c:
            lines.append(f"- {part}: no results (pytest did not finish; see tests.log)")
            continue
        lines.append(f"- {part}: {c['passed']} passed, {c['failed']} failed, {c['errors']} errors, {c['skipped']} skipped")
        lines += [f"  - FAILED {name}" for name in c["failures"]]
        lines += [f"  - skipped: {reason}" for reason in c["skips"]]
    return lines or ["- no tests ran"], counts


def run_section(work: Path, name: str) -> tuple[list[str], dict | None]:
    runs = work / "runs"
    lines = [f"### {name}", ""]
    cmd = runs / f"{name}.cmd"
    if cmd.is_file():
        lines += ["```", cmd.read_text().strip(), "```", ""]
    result = read_json(runs / f"{name}.json")
    if result and result.get("summary"):
        lines += run_table(result["summary"]) + [""]
        lines += [f"{key}: {value}" for key, value in result.items() if isinstance(value, str) and key != "run_dir"]
        lines.append("")
    else:
        err = runs / f"{name}.err"
        tail = err.read_text().strip().splitlines()[-6:] if err.is_file() else []
        lines += ["no summary; the end of its stderr:", "```", *tail, "```", ""] if tail else ["no summary", ""]
    return lines, result


def write_summary(work: Path, out_dir: Path) -> int:
    steps, env = read_steps(work), read_json(work / "env.json")
    notes = (work / "notes.txt").read_text().splitlines() if (work / "notes.txt").is_file() else []
    passed = bool(steps) and all(s["status"] in PASSING for s in steps)
    lines = [f"# ssdbench GPU check: {'PASSED' if passed else 'FAILED'}", "",
             f"{time.strftime('%Y-%m-%d %H:%M:%S %Z')}", "", "## Machine", "", *machine_lines(env), "",
             "## Steps", "", "| step | status | seconds | note |", "| --- | --- | --- | --- |"]
    lines += [f"| {s['name']} | {s['status']} | {s['seconds']} | {s['note']} |" for s in steps]
    tests, counts = test_lines(work)
    lines += ["", "## Tests", "", *tests, "", "## Runs", ""]
    results = {}
    for name in [s["name"] for s in steps if (work / "runs" / f"{s['name']}.cmd").is_file()]:
        section, results[name] = run_section(work, name)
        lines += section
    lines += ["## Notes", "", *(f"- {n}" for n in notes or ["none"]), ""]
    (out_dir / "summary.md").write_text("\n".join(lines))
    record = {"passed": passed, "environment": env, "steps": steps, "tests": counts, "runs": results, "notes": notes}
    (out_dir / "summary.json").write_text(json.dumps(record, indent=1))
    return 0 if passed else 1
