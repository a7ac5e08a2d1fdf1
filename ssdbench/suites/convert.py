"""Turn raw records into Prompts, and records from files into a Suite.

One set of field rules covers every format we read, so a user's own file and the usual
public layouts behave the same:
- GSM8K `{"question", "answer"}`, Alpaca `{"instruction", "input"}`, UltraFeedback
  `{"instruction"}` or `{"prompt", "prompt_id"}`, Spec-Bench and MT-Bench
  `{"question_id", "category", "turns"}`, HumanEval `{"task_id", "prompt"}`;
- or a bare JSON string.

The prompt text is the first field present in this order: `prompt`, `text`, `question`,
`instruction` (followed by a non-blank `input`, Alpaca style), then `turns` (its first
turn); other fields are ignored. A record with none of them is refused, naming its file
and line. The field used is kept on each prompt and counted in the run manifest.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ssdbench.errors import SuiteError
from ssdbench.suites.prompt import Prompt, Suite
from ssdbench.suites.readers import Record, read_records

TEXT_FIELDS = ("prompt", "text", "question", "instruction", "turns")
ID_FIELDS = ("id", "prompt_id", "question_id", "task_id")


def suite_from_files(name: str, paths: Sequence[Path], *, source: str) -> Suite:
    """Read `paths` in order into one suite; ids must be unique and the suite non-empty."""
    records: list[Record] = []
    for path in paths:
        records.extend(read_records(path))
    prompts = prompts_from_records(name, records)
    if not prompts:
        raise SuiteError(f"suite '{name}' from {source} has no prompts")
    return Suite(name=name, source=source, prompts=tuple(prompts))


def prompts_from_records(suite_name: str, records: Sequence[Record]) -> list[Prompt]:
    """Convert records, numbering those without an id by their position (0-based)."""
    prompts: list[Prompt] = []
    first_seen: dict[str, str] = {}
    for index, (where, record) in enumerate(records):
        prompt = prompt_from_record(suite_name, record, index=index, where=where)
        if prompt.prompt_id in first_seen:
            raise SuiteError(
                f"duplicate prompt id '{prompt.prompt_id}' at {where} "
                f"(first at {first_seen[prompt.prompt_id]})"
            )
        first_seen[prompt.prompt_id] = where
        prompts.append(prompt)
    return prompts


def prompt_from_record(suite_name: str, record: Any, *, index: int, where: str) -> Prompt:
    """One Prompt from a JSON string or object; `where` names the line for errors."""
    if isinstance(record, str):
        return Prompt(prompt_id=f"{suite_name}/{index}", text=require_text(record, where), text_field="string")
    if not isinstance(record, dict):
        raise SuiteError(f"{where}: expected a JSON string or object, got {type(record).__name__}")
    turns = read_turns(record, where)
    text, text_field = (turns[0], "turns") if turns else read_text(record, where)
    local_id = next((record[k] for k in ID_FIELDS if record.get(k) not in (None, "")), index)
    category = record.get("category")
    return Prompt(
        prompt_id=f"{suite_name}/{str(local_id).replace('/', '_')}",
        text=text,
        category=None if category is None else str(category),
        turns=turns,
        text_field=text_field,
    )


def read_text(record: dict, where: str) -> tuple[str, str]:
    """(text, field used): the first text field present; Alpaca's optional `input` follows its instruction."""
    field = next((k for k in TEXT_FIELDS if k in record and k != "turns"), None)
    if field is None:
        raise SuiteError(
            f"{where}: no prompt text; expected a JSON string or an object with one of "
            f"{', '.join(TEXT_FIELDS)}"
        )
    text = require_text(record[field], f"{where} field '{field}'")
    extra = record.get("input") if field == "instruction" else None
    if isinstance(extra, str) and extra.strip():
        return f"{text}\n\n{extra}", "instruction+input"
    return text, field


def read_turns(record: dict, where: str) -> tuple[str, ...]:
    """All user turns when the record has a `turns` list (and no plainer text field first)."""
    if "turns" not in record or any(k in record for k in TEXT_FIELDS[:-1]):
        return ()
    turns = record["turns"]
    if not isinstance(turns, list) or not turns:
        raise SuiteError(f"{where} field 'turns': expected a non-empty list of strings")
    return tuple(require_text(turn, f"{where} field 'turns'") for turn in turns)


def require_text(value: Any, where: str) -> str:
    """A prompt must be a non-blank string: an empty one would decode from zero tokens."""
    if not isinstance(value, str):
        raise SuiteError(f"{where}: expected a string, got {type(value).__name__}")
    if not value.strip():
        raise SuiteError(f"{where}: prompt text is empty")
    return value
