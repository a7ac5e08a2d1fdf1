"""The dtype a server says it runs, probed against servers on 127.0.0.1 the way each engine reports it (issue 32):
llama-server's /props `model_ftype`, vLLM's /metrics `vllm:model_config_info{dtype=...}`; unknown where a server
does not say or says it in a shape of its own (never a crash); recorded in the manifest by `ssdbench run`."""

from __future__ import annotations

import json

import pytest

from canned_server import CannedStream, serving
from misbehaving_server import run_against
from ssdbench.endpoints.preflight import probe
from ssdbench.endpoints.spec import Endpoint


class SelfReporting(CannedStream):
    owner = "llamacpp"
    props: object = None
    metrics: str | None = None

    def do_GET(self):  # noqa: N802 - the stdlib's name
        cls = type(self)
        if self.path == "/v1/models":
            self.reply(200, "application/json", json.dumps({"data": [{"id": "m", "owned_by": cls.owner}]}).encode())
        elif self.path == "/props" and cls.props is not None:
            self.reply(200, "application/json", json.dumps(cls.props).encode())
        elif self.path == "/metrics" and cls.metrics is not None:
            self.reply(200, "text/plain; version=0.0.4", cls.metrics.encode())
        else:
            self.reply(404, "application/json", b'{"error": {"message": "no such route"}}')


def probed(**answers):
    handler = type("Answers", (SelfReporting,), answers)
    with serving(handler) as url:
        return probe(Endpoint("e", url))


@pytest.mark.parametrize("ftype, bound", [("BF16", "bfloat16"), ("(guessed) F16", "float16"), ("all F32", "float32"),
                                          ("Q4_0", None)])
def test_llama_server_reports_its_file_type_on_props(ftype, bound):
    info = probed(props={"model_ftype": ftype, "build_info": "b1"})
    assert info.kind == "llama.cpp" and info.dtype == ftype and info.version == "b1"
    assert info.describe()["server_dtype"] == ftype and info.describe()["near_tie_dtype"] == bound


@pytest.mark.parametrize("dtype, bound", [("bfloat16", "bfloat16"), ("torch.float16", "float16"), ("fp8", None)])
def test_vllm_reports_its_dtype_in_the_model_config_gauge(dtype, bound):
    gauge = f'vllm:model_config_info{{dtype="{dtype}",model="m",served_model_name="m"}} 1.0\n'
    info = probed(owner="vllm", metrics=gauge)
    assert info.dtype == dtype and info.describe()["near_tie_dtype"] == bound


@pytest.mark.parametrize("answers", [{"owner": "vllm", "metrics": "vllm:num_requests_running 0\n"},
                                     {"owner": "vllm"}, {"props": [1, 2]}, {"props": {"model_ftype": 16}},
                                     {"props": {}}, {"owner": "someone", "props": {"model_ftype": "BF16"}}])
def test_a_server_that_does_not_say_has_an_unknown_dtype(answers):
    info = probed(**answers)
    assert info.dtype is None and info.describe()["near_tie_dtype"] is None


def test_the_run_records_the_servers_dtype_in_its_manifest(tmp_path):
    outcome = run_against(tmp_path, models={"data": [{"id": "m", "owned_by": "llamacpp"}]},
                          props={"model_ftype": "Q4_0"})
    assert outcome.returncode == 0, outcome.last_error
    described = json.loads((tmp_path / "run" / "manifest.json").read_text())["endpoints"]["endpoints"]["f"]
    assert described["server_dtype"] == "Q4_0" and described["near_tie_dtype"] is None
