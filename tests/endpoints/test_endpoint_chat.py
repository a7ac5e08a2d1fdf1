"""`--endpoint-api chat` against a real llama-server: streamed chat deltas, the server's own chat
template checked against ours by prompt token count, greedy identity with the completions API on the
same server, the speculation figures as for completions, and a 404 as one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

from canned_server import CannedStream, serving
from llama_server import require_server, started
from ssdbench.endpoints.consistency import request_acceptance
from ssdbench.endpoints.engines import llama_cpp
from ssdbench.endpoints.wire.http import RequestFailed
from ssdbench.endpoints.wire.request import Sampling, stream_chat, stream_completion
from ssdbench.suites.chat import as_id_list, chat_messages

CLI = [sys.executable, "-c", "from ssdbench.cli.main import main; main()"]
SMALL = ["--suite", "smoke", "--num-prompts", "2", "--max-new-tokens", "12", "--ignore-eos", "--threads", "1"]
GREEDY = Sampling(max_new_tokens=20, temperature=0.0, top_p=1.0, seed=0, ignore_eos=True)
TEXT = "Write a Python function that adds two numbers."


def ssdbench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"})


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    require_server()
    plain, plain_context = started(tmp_path_factory, "plain")[:2]
    spec, spec_context = started(tmp_path_factory, "spec", draft=True)[:2]
    yield plain, spec
    for context in (plain_context, spec_context):
        context.__exit__(None, None, None)


@pytest.fixture(scope="module")
def templated_ids():
    """TEXT as the methods' prompt: SmolLM2's tokenizer with its chat template (suites.chat)."""
    from transformers import AutoTokenizer

    from ssdbench.models.checkpoint.embedded import converted_folder, embedded_gguf_path

    require_server()
    tokenizer = AutoTokenizer.from_pretrained(str(converted_folder(embedded_gguf_path())))
    return as_id_list(tokenizer.apply_chat_template(chat_messages(TEXT), add_generation_prompt=True, tokenize=True))


def chat(endpoint, **kwargs):
    return stream_chat(endpoint.url, "smollm2", chat_messages(TEXT), GREEDY, timeout_s=120,
                       read_acceptance=request_acceptance, extra={"cache_prompt": False}, **kwargs)


def test_a_streamed_chat_answer_with_the_servers_prompt_count(servers, templated_ids):
    plain, _ = servers
    done = chat(plain)
    assert done.finish_reason == "length" and done.usage["completion_tokens"] == GREEDY.max_new_tokens
    assert len(done.chunks) >= 2 and all(c.text for c in done.chunks) and done.text.strip()
    times = [c.t_ns for c in done.chunks]
    assert done.start_ns < times[0] and times == sorted(times) and times[-1] <= done.end_ns
    assert done.server_prompt_tokens == len(templated_ids)  # the server's template made our tokens
    assert done.acceptance is None


def test_greedy_chat_equals_completions_on_our_templated_ids(servers, templated_ids):
    plain, spec = servers
    from_ids = stream_completion(plain.url, "smollm2", templated_ids, GREEDY, timeout_s=120,
                                 read_acceptance=request_acceptance, extra={"cache_prompt": False})
    assert chat(plain).text == from_ids.text
    assert chat(spec).text == from_ids.text  # and the draft changes nothing


def test_chat_carries_the_speculation_figures(servers):
    _, spec = servers
    reading = chat(spec).acceptance
    assert reading.source == llama_cpp.SOURCE and reading.draft_tokens > 0
    assert 0 <= reading.accepted_tokens <= reading.draft_tokens


def test_chat_on_a_path_that_404s_fails_the_request_in_one_line(servers):
    plain, _ = servers
    with pytest.raises(RequestFailed) as caught:
        stream_chat(plain.url + "/nowhere", "smollm2", chat_messages(TEXT), GREEDY, timeout_s=30,
                    read_acceptance=request_acceptance)
    assert str(caught.value).startswith(f"HTTP 404 Not Found from {plain.url}/nowhere/v1/chat/completions")
    assert "\n" not in str(caught.value)


def test_run_with_chat_records_both_prompt_counts_and_warns_when_they_differ(servers, tmp_path):
    plain, _ = servers
    same = ssdbench("run", "--methods", "ar", *SMALL, "--endpoint", f"plain={plain.url}", "--endpoint-api", "chat",
                    "--out", str(tmp_path / "same"))
    assert same.returncode == 0, same.stderr
    table = pq.read_table(tmp_path / "same" / "endpoints.parquet").to_pandas()
    requests = pq.read_table(tmp_path / "same" / "requests.parquet").to_pandas()
    sent = requests[requests["method"] == "plain"]
    assert (table["status"] == "ok").all() and (sent["new_tokens"] == 12).all()
    assert sorted(table["server_prompt_tokens"]) == sorted(sent["prompt_tokens"])
    assert "warning" not in same.stdout + same.stderr
    manifest = json.loads((tmp_path / "same" / "manifest.json").read_text())
    assert manifest["endpoints"]["endpoints"]["plain"]["api"] == "chat"
    # the methods' ids untemplated: the server's templated chat is longer, and the run says so once
    other = ssdbench("run", "--methods", "none", *SMALL, "--no-chat-template", "--endpoint", f"plain={plain.url}",
                     "--endpoint-api", "plain=chat", "--out", str(tmp_path / "other"))
    assert other.returncode == 0, other.stderr
    printed = " ".join(other.stdout.split())
    assert printed.count("warning: plain@endpoint-c1: the server counted") == 1 and "2/2 requests differ" in printed


class ChatNotFound(CannedStream):
    """An OpenAI-compatible server without a chat route (llama-server always has one)."""

    def do_GET(self):  # noqa: N802 - the stdlib's name
        if self.path == "/v1/models":
            self.answer(200, {"object": "list", "data": [{"id": "m", "owned_by": "someone"}]})
        else:
            self.answer(404, {"error": {"message": "no such route"}})

    def do_POST(self):  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.answer(404, {"error": {"message": f"route {self.path} not found"}})

    def answer(self, status: int, body: dict) -> None:
        self.reply(status, "application/json", json.dumps(body).encode())

    def log_message(self, *args):
        pass


def test_run_against_a_server_without_chat_marks_requests_failed_with_the_reason(tmp_path):
    require_server()
    out = tmp_path / "run"
    with serving(ChatNotFound) as url:
        result = ssdbench("run", "--methods", "none", *SMALL, "--endpoint", f"nochat={url}", "--endpoint-api", "chat",
                          "--out", str(out))
    assert result.returncode == 1 and "Traceback" not in result.stderr
    last = [line for line in result.stderr.splitlines() if line.strip()][-1]
    assert last.startswith("error: 2 endpoint request(s) failed") and "HTTP 404" in last
    table = pq.read_table(out / "endpoints.parquet").to_pandas()
    assert (table["status"] == "failed").all()
    assert all("route /v1/chat/completions not found" in e for e in table["error"])
    described = json.loads((out / "manifest.json").read_text())["endpoints"]["endpoints"]["nochat"]
    assert described["acceptance_from_metrics"].startswith("no fallback: GET /metrics failed (HTTP 404")
