"""A real `ssdbench serve` in a process of its own, and small HTTP helpers to talk to it."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

CLI = [sys.executable, "-c", "from ssdbench.cli.main import main; main()"]
READY_TIMEOUT_S = 300


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Server:
    url: str
    port: int
    process: subprocess.Popen
    out: Path
    log: Path

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


def serve_command(target: Path, method: str, port: int, out: Path, *extra: str) -> list[str]:
    return [*CLI, "serve", "--method", method, "--target", str(target), "--port", str(port), "--out", str(out),
            "--threads", "1", *extra]


@contextlib.contextmanager
def running_server(target: Path, method: str, tmp: Path, *extra: str) -> Iterator[Server]:
    """The server, ready; stopped with SIGTERM (and waited for) afterwards."""
    port = free_port()
    log = tmp / f"serve-{method}-{port}.log"
    with open(log, "wb") as sink:
        process = subprocess.Popen(serve_command(target, method, port, tmp / f"records-{port}", *extra), stdout=sink,
                                   stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    server = Server(f"http://127.0.0.1:{port}", port, process, tmp / f"records-{port}", log)
    try:
        wait_healthy(server)
        yield server
    finally:
        stop(server)


def wait_healthy(server: Server) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise AssertionError(f"the server exited with {server.process.returncode}: {server.log_text()[-2000:]}")
        with contextlib.suppress(OSError):
            if get(server, "/health")[0] == 200:
                return
        time.sleep(0.2)
    raise AssertionError(f"the server was not ready in {READY_TIMEOUT_S} s: {server.log_text()[-2000:]}")


def stop(server: Server, sig: int = signal.SIGTERM, timeout_s: float = 120) -> int:
    if server.process.poll() is None:
        server.process.send_signal(sig)
        try:
            server.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(server.process.pid, signal.SIGKILL)
            server.process.wait()
            raise AssertionError(f"the server did not stop within {timeout_s} s: {server.log_text()[-2000:]}")
    return server.process.returncode


def _connection(server: Server, timeout_s: float = 120) -> http.client.HTTPConnection:
    return http.client.HTTPConnection("127.0.0.1", server.port, timeout=timeout_s)


def get(server: Server, path: str) -> tuple[int, bytes]:
    conn = _connection(server, timeout_s=10)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def post(server: Server, path: str, body: dict | bytes) -> tuple[int, dict]:
    """A whole (not streamed) answer: its status and JSON."""
    conn = _connection(server)
    try:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        conn.request("POST", path, body=data, headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        return response.status, json.loads(response.read() or b"null")
    finally:
        conn.close()


def stream(server: Server, path: str, body: dict, *, stop_after_events: int | None = None) -> list[dict]:
    """A streamed answer's events (the JSON of each `data:` line before [DONE]); with `stop_after_events`,
    the connection is closed after that many events, as a client that goes away."""
    conn = _connection(server)
    events: list[dict] = []
    try:
        conn.request("POST", path, body=json.dumps({**body, "stream": True}).encode(),
                     headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        assert response.status == 200, response.read()
        for line in response:
            line = line.strip()
            if not line.startswith(b"data: "):
                continue
            payload = line[len(b"data: "):]
            if payload == b"[DONE]":
                break
            events.append(json.loads(payload))
            if stop_after_events is not None and len(events) >= stop_after_events:
                break
    finally:
        conn.close()
    return events


def streamed_ids(events: list[dict]) -> list[int]:
    return [t for e in events for c in e.get("choices", ()) for t in c.get("token_ids", ())]


def streamed_text(events: list[dict]) -> str:
    return "".join(c.get("text") or c.get("delta", {}).get("content") or "" for e in events
                   for c in e.get("choices", ()))
