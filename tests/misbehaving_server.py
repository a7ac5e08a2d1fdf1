"""A server on 127.0.0.1 that answers like an OpenAI-compatible engine except where a test says otherwise,
and `ssdbench run --methods none --endpoint` against it in a subprocess, as a user runs it.

The warm-up is the first POST; `bad` (when set) answers the second, the first measured request, so a run
shows both what one wrong answer does to its own request and that the other request is kept."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq

from canned_server import CannedStream, serving

CLI = [sys.executable, "-c", "from ssdbench.cli.main import main; main()"]
SMALL = ["--suite", "smoke", "--num-prompts", "2", "--max-new-tokens", "3", "--threads", "1"]
MODELS = {"object": "list", "data": [{"id": "m", "owned_by": "someone"}]}


def sse(events: list) -> bytes:
    return "".join(f"data: {json.dumps(e)}\n\n" for e in events).encode() + b"data: [DONE]\n\n"


def good_events(model: str = "m") -> list[dict]:
    """A completions stream as vLLM sends it with return_token_ids: 3 tokens, then the usage chunk."""
    return [{"model": model, "choices": [{"index": 0, "text": "ab", "token_ids": [5, 6], "finish_reason": None}]},
            {"model": model, "choices": [{"index": 0, "text": "c", "token_ids": [7], "finish_reason": "length"}]},
            {"model": model, "choices": [], "usage": {"completion_tokens": 3}}]


class Misbehaving(CannedStream):
    models: object = MODELS  # the JSON /v1/models answers with
    metrics = None  # /metrics text as a function of the POSTs served so far; None: 404
    props: object = None  # the JSON GET /props answers with (llama-server's self-report); None: 404
    good: bytes = sse(good_events())
    bad: bytes | None = None  # the answer to the first measured request
    bodies: list | None = None  # where a list is given, every POST's JSON body is appended to it
    posts = 0

    def do_GET(self):  # noqa: N802 - the stdlib's name
        cls = type(self)
        if self.path == "/v1/models":
            self.reply(200, "application/json", json.dumps(cls.models).encode())
        elif self.path == "/metrics" and cls.metrics is not None:
            self.reply(200, "text/plain; version=0.0.4", cls.metrics(cls.posts).encode())
        elif self.path == "/props" and cls.props is not None:
            self.reply(200, "application/json", json.dumps(cls.props).encode())
        else:
            self.reply(404, "application/json", b'{"error": {"message": "no such route"}}')

    def do_POST(self):  # noqa: N802
        raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        cls = type(self)
        if cls.bodies is not None:
            cls.bodies.append(json.loads(raw))
        cls.posts += 1
        body = cls.bad if cls.bad is not None and cls.posts == 2 else cls.good
        self.reply(200, "text/event-stream", body)


@dataclass
class Outcome:
    returncode: int
    stdout: str  # whitespace-joined, as Rich may wrap it
    last_error: str | None
    endpoints: object  # the endpoints table as a DataFrame, or None when the run wrote none

    @property
    def rows(self) -> list[dict]:
        return [] if self.endpoints is None else self.endpoints.to_dict("records")


def run_against(tmp_path: Path, *args: str, **answers) -> Outcome:
    """`ssdbench run` against a Misbehaving server given `answers` (class attributes) for this run."""
    handler = type("Answers", (Misbehaving,), {"posts": 0, **answers})
    out = tmp_path / "run"
    with serving(handler) as url:
        result = subprocess.run([*CLI, "run", "--methods", "none", *SMALL, "--endpoint", f"f={url}", "--out", str(out),
                                 *args], capture_output=True, text=True, timeout=300,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert "internal error" not in result.stderr and "Traceback" not in result.stderr, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    table = out / "endpoints.parquet"
    return Outcome(result.returncode, " ".join(result.stdout.split()), errors[-1] if errors else None,
                   pq.read_table(table).to_pandas() if table.exists() else None)
