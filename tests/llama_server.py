"""The real llama.cpp server for endpoint tests: built by `make llama-server` into the user's cache,
started here on 127.0.0.1 with the embedded SmolLM2 GGUF, with or without its Q4_0 draft."""

from __future__ import annotations

import shlex
import socket
from pathlib import Path

import pytest

from ssdbench.endpoints.engines.llama_cpp_build import model_paths, server_binary

DRAFT_MAX = 4


def require_server() -> Path:
    binary = server_binary()
    if binary is None:
        pytest.skip("llama-server is not built (make llama-server); CI builds it before the tests")
    return binary


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def server_command(port: int, *, draft: bool = False, parallel: int = 1, threads: int = 1,
                   metrics: bool = False) -> str:
    binary = require_server()
    target, draft_model = model_paths()
    args = [str(binary), "-m", str(target), "--host", "127.0.0.1", "--port", str(port), "-t", str(threads),
            "-c", str(1024 * parallel), "-np", str(parallel), "--no-webui", "-a", "smollm2"]
    if draft:
        args += ["-md", str(draft_model), "--spec-type", "draft-simple", "--spec-draft-n-max", str(DRAFT_MAX),
                 "--spec-draft-n-min", "0", "-td", str(threads)]
    if metrics:
        args.append("--metrics")  # Prometheus counters on GET /metrics
    return shlex.join(args)


def closed_port_url() -> str:
    return f"http://127.0.0.1:{free_port()}"


def code_prompt_ids() -> list[int]:
    """A short code prompt in SmolLM2's ids, read from the GGUF's vocabulary (no model load)."""
    from gguf import GGUFReader

    from ssdbench.models.checkpoint.embedded import embedded_gguf_path

    field = GGUFReader(str(embedded_gguf_path())).fields["tokenizer.ggml.tokens"]
    vocab = {bytes(field.parts[i]).decode("utf-8"): n for n, i in enumerate(field.data)}
    words = ("def", "Ġadd", "(", "a", ",", "Ġb", "):", "Ċ", "Ġ", "Ġreturn", "Ġa", "Ġ+", "Ġb", "Ċ", "Ċ", "def", "Ġmul")
    ids = [vocab[w] for w in words if w in vocab]
    assert len(ids) >= 10
    return ids


def started(tmp_path_factory, name: str, **kwargs):
    """A llama-server (server_command's options) launched as the runs launch one, ready: (endpoint, the
    launch context to __exit__ when done, its process, its log). For module-scoped fixtures."""
    from ssdbench.endpoints.launch import launched
    from ssdbench.endpoints.spec import Endpoint

    port = free_port()
    endpoint = Endpoint(name, f"http://127.0.0.1:{port}", launch=server_command(port, **kwargs))
    log = tmp_path_factory.mktemp("logs") / f"{name}.log"
    context = launched(endpoint, log, ready_timeout_s=120)
    return endpoint, context, context.__enter__(), log
