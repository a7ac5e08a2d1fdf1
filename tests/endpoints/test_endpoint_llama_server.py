"""The endpoint client against a real llama-server on 127.0.0.1 (skipped only where it is not built):
streamed timings, acceptance from its draft, greedy identity with and without the draft, launch and
stop, and faults (closed port, wrong model, a server killed mid-stream, a timeout)."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from llama_server import DRAFT_MAX, closed_port_url, code_prompt_ids, free_port, require_server, server_command, started
from ssdbench.endpoints.consistency import request_acceptance
from ssdbench.endpoints.engines import llama_cpp
from ssdbench.endpoints.launch import launched
from ssdbench.endpoints.preflight import EndpointError, probe
from ssdbench.endpoints.spec import Endpoint
from ssdbench.endpoints.wire.http import RequestFailed
from ssdbench.endpoints.wire.request import Sampling, stream_completion

GREEDY = Sampling(max_new_tokens=24, temperature=0.0, top_p=1.0, seed=0, ignore_eos=True)


@pytest.fixture(scope="module")
def prompt_ids():
    require_server()
    return code_prompt_ids()


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    endpoint, context, *_ = started(tmp_path_factory, "plain")
    yield endpoint
    context.__exit__(None, None, None)


@pytest.fixture(scope="module")
def speculating(tmp_path_factory):
    endpoint, context, *_ = started(tmp_path_factory, "spec", draft=True)
    yield endpoint
    context.__exit__(None, None, None)


def complete(endpoint, prompt_ids, sampling=GREEDY, **kwargs):
    info = probe(endpoint)
    return stream_completion(endpoint.url, info.model, prompt_ids, sampling, timeout_s=kwargs.pop("timeout_s", 120),
                             read_acceptance=request_acceptance, extra={"cache_prompt": False}, **kwargs)


def test_probe_reads_kind_model_and_version(plain):
    info = probe(plain)
    assert info.kind == "llama.cpp"
    assert info.model == "smollm2" and info.models_listed == ("smollm2",)
    assert info.version  # llama-server's build_info


def test_streamed_timings_and_no_acceptance_without_a_draft(plain, prompt_ids):
    done = complete(plain, prompt_ids)
    assert done.finish_reason == "length"
    assert done.usage["completion_tokens"] == GREEDY.max_new_tokens
    assert len(done.chunks) >= 2 and done.text
    times = [c.t_ns for c in done.chunks]
    assert done.start_ns < times[0] == done.first_token_ns and times == sorted(times) and times[-1] <= done.end_ns
    assert done.acceptance is None
    assert done.model == "smollm2"


def test_acceptance_from_the_draft_is_a_rate_without_verify_steps(speculating, prompt_ids):
    done = complete(speculating, prompt_ids)
    reading = done.acceptance
    assert reading is not None and reading.source == llama_cpp.SOURCE
    assert reading.draft_tokens > 0 and 0 <= reading.accepted_tokens <= reading.draft_tokens
    assert reading.verify_steps is None and reading.acceptance_length is None
    # at most DRAFT_MAX drafted per verify, and never more verifies than tokens
    assert reading.draft_tokens <= DRAFT_MAX * GREEDY.max_new_tokens


def test_greedy_outputs_are_identical_with_and_without_the_draft(plain, speculating, prompt_ids):
    assert complete(speculating, prompt_ids).text == complete(plain, prompt_ids).text


def test_closed_port_and_wrong_model_are_one_line_errors():
    with pytest.raises(EndpointError, match="connection refused"):
        probe(Endpoint("gone", closed_port_url()))


def test_wrong_model_is_refused(plain):
    with pytest.raises(EndpointError, match="does not serve model 'llama-70b'.*smollm2"):
        probe(Endpoint(plain.name, plain.url, model="llama-70b"))


def test_timeout_fails_the_request(plain, prompt_ids):
    slow = Sampling(max_new_tokens=400, temperature=0.0, top_p=1.0, seed=0, ignore_eos=True)
    with pytest.raises(RequestFailed, match="timeout|took longer"):
        complete(plain, prompt_ids, slow, timeout_s=0.5)


def test_a_server_killed_mid_stream_fails_the_request(tmp_path_factory, prompt_ids):
    endpoint, context, process, _ = started(tmp_path_factory, "doomed")
    try:
        long = Sampling(max_new_tokens=600, temperature=0.0, top_p=1.0, seed=0, ignore_eos=True)
        errors: list[str] = []

        def send():
            try:
                complete(endpoint, prompt_ids, long)
            except RequestFailed as err:
                errors.append(str(err))

        thread = threading.Thread(target=send)
        thread.start()
        time.sleep(2.0)  # well inside the 600-token answer
        os.killpg(process.pid, signal.SIGKILL)
        thread.join(30)
        assert errors and any(w in errors[0] for w in ("before [DONE]", "closed the connection", "broke off"))
    finally:
        context.__exit__(None, None, None)


def test_launch_stops_the_whole_group_and_keeps_the_log(tmp_path, prompt_ids):
    port = free_port()
    endpoint = Endpoint("launched", f"http://127.0.0.1:{port}", launch=server_command(port))
    log = tmp_path / "server.log"
    with launched(endpoint, log, ready_timeout_s=120) as process:
        assert probe(endpoint).model == "smollm2"
    assert process.poll() is not None
    with pytest.raises(EndpointError, match="connection refused"):
        probe(endpoint)
    assert "llama" in log.read_text(errors="replace").lower()


def test_a_launch_that_exits_is_one_line_with_the_log_tail(tmp_path):
    endpoint = Endpoint("broken", closed_port_url(), launch="echo cannot load model >&2; exit 3")
    with pytest.raises(EndpointError, match="exited with code 3.*cannot load model"):
        with launched(endpoint, tmp_path / "broken.log", ready_timeout_s=30):
            pass


def test_a_launch_that_never_serves_times_out_and_is_stopped(tmp_path):
    endpoint = Endpoint("silent", closed_port_url(), launch="sleep 600.25 & sleep 600.5")  # a child of its own too
    started = time.monotonic()
    with pytest.raises(EndpointError, match="not ready within 1 s"):
        with launched(endpoint, tmp_path / "silent.log", ready_timeout_s=1):
            pass
    assert time.monotonic() - started < 15
    deadline = time.monotonic() + 5  # a SIGKILLed process may take a moment to be scheduled out on a busy machine
    while (running("600.25") or running("600.5")) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not running("600.25") and not running("600.5")  # nothing left behind


def running(marker: str) -> bool:
    """Whether any process's command line holds `marker`."""
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if marker.encode() in f.read():
                    return True
        except OSError:
            continue
    return False
