"""SSD through its real draft process: exactness, and clean failure when either side dies."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from cli_fixtures import save_tiny_model
from decode_helpers import decode, sampling_rows
from ssdbench.errors import DraftServerError
from ssdbench.models.recipe import ModelRecipe
from ssdbench.speculation.client import DraftServer, RemoteSsdProposer
from ssdbench.speculation.fan_out import build_fan_out
from ssdbench.speculation.server import DraftSpec

PROMPTS = [[5, 9, 13, 5, 9], [3, 3, 8], [40, 41, 42, 43], [2, 6, 10], [7], [11, 12, 11, 12], [30, 31], [50, 2, 50]]


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return save_tiny_model(tmp_path_factory.mktemp("ssd") / "tiny", vocab=64, seed=2)


def spec_for(folder: Path, *, k: int = 3, backup: str = "jit", model_path: str | None = None, int8: bool = True,
             saguaro_c: float = 1.0, cores: tuple[int, ...] | None = None, fan_out: str = "2") -> DraftSpec:
    return DraftSpec(recipe=ModelRecipe(model_path=model_path or str(folder), int8=int8), cores=cores, k=k,
                     fan_out=build_fan_out(fan_out, k=k, fan_out_list=None, miss_list=None),
                     backup=backup, saguaro_c=saguaro_c, seed=0)


def target_model(folder: Path):
    from ssdbench.models.build import build_native_model
    from ssdbench.models.checkpoint.source import resolve_model
    from ssdbench.models.checkpoint.weights import load_config, load_state_dict

    source = resolve_model(str(folder))
    return build_native_model(load_config(source), load_state_dict(source, dtype=torch.float32))


@pytest.mark.parametrize("batch_size,backup", [(1, "jit"), (4, "fast"), (8, "auto")])
def test_remote_ssd_greedy_matches_ar(folder, batch_size, backup):
    target = target_model(folder)
    prompts = PROMPTS[:batch_size]
    ar, _ = decode(target, None, prompts, max_new_tokens=16, k=0)
    with DraftServer(spec_for(folder, backup=backup), num_rows=batch_size, max_prompt=8, vocab_size=64, with_q=False) as server:
        proposer = RemoteSsdProposer(server, sampling_rows(batch_size, 0.0))
        ssd, steps = decode(target, proposer, prompts, max_new_tokens=16, k=3)
        assert server.process.is_alive()
    assert [r.output_ids for r in ssd.rows] == [r.output_ids for r in ar.rows]
    assert_ssd_records(steps, backups={"auto": {"jit", "fast"}}.get(backup, {backup}))
    assert not server.process.is_alive()


def assert_ssd_records(steps, *, backups: set[str]) -> None:
    """Every round of every row is a hit or a miss; a miss names its backup, a hit none and had a tree."""
    assert steps and all(isinstance(s.extras["cache_hit"], bool) for s in steps)
    assert all((s.extras["backup"] is None) == s.extras["cache_hit"] for s in steps)
    assert {s.extras["backup"] for s in steps if not s.extras["cache_hit"]} <= backups
    assert all(s.extras["fan_out_total"] > 0 for s in steps if s.extras["cache_hit"])


def test_killing_the_draft_mid_run_is_a_clear_error(folder):
    target = target_model(folder)
    with DraftServer(spec_for(folder), num_rows=1, max_prompt=8, vocab_size=64, with_q=False) as server:
        proposer = RemoteSsdProposer(server, sampling_rows(1, 0.0))

        class KillAfterTwo(RemoteSsdProposer):
            rounds = 0

            def propose(self, batch):
                self.rounds += 1
                if self.rounds == 3:
                    os.kill(server.process.pid, signal.SIGKILL)
                return super().propose(batch)

        proposer = KillAfterTwo(server, sampling_rows(1, 0.0))
        start = time.monotonic()
        with pytest.raises(DraftServerError, match="draft process"):
            decode(target, proposer, PROMPTS[:1], max_new_tokens=40, k=3)
        assert time.monotonic() - start < 10
    assert not server.process.is_alive()


def test_a_bad_draft_model_fails_at_start(folder, tmp_path):
    with pytest.raises(DraftServerError, match="could not start"):
        with DraftServer(spec_for(folder, model_path=str(tmp_path / "missing")), num_rows=1, max_prompt=8,
                         vocab_size=64, with_q=False):
            pass


def test_draft_process_exits_when_the_verifier_dies(folder):
    script = textwrap.dedent(f"""
        import os, sys
        sys.path[:0] = [{str(Path(__file__).parent)!r}, {str(Path(__file__).parents[1])!r}]  # this file's folder, tests/
        from test_ssd_process import spec_for
        from pathlib import Path
        from ssdbench.speculation.client import DraftServer
        server = DraftServer(spec_for(Path({str(folder)!r})), num_rows=1, max_prompt=8, vocab_size=64, with_q=False)
        server.__enter__()
        print(server.process.pid, flush=True)
        os._exit(0)  # die without stopping the draft
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    pid = int(out.stdout.strip().splitlines()[-1])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.1)
    assert not _alive(pid), "the draft process outlived its verifier"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (exited, not yet reaped) counts as gone
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def ssd_run(folder: Path, out: Path, *extra: str):
    from typer.testing import CliRunner

    from ssdbench.cli.main import app

    return CliRunner().invoke(app, ["run", "--target", str(folder), "--suite", "smoke", "--num-prompts", "2",
                                    "--max-new-tokens", "12", "--no-chat-template", "--methods", "ssd", "--k", "2",
                                    "--fan-out", "1", "--out", str(out), *extra])


def test_a_hung_draft_fails_the_run_after_the_round_timeout(folder, tmp_path, monkeypatch):
    """The draft process stays alive but stops (SIGSTOP) mid-run: the verifier must not wait forever."""
    import json

    from cli_checks import assert_one_line_error

    stopped = []
    original = RemoteSsdProposer.propose

    def stop_the_draft_on_round_three(self, batch):
        if len(stopped) < 3:
            stopped.append(self.server.process.pid)
            if len(stopped) == 3:
                os.kill(self.server.process.pid, signal.SIGSTOP)
        return original(self, batch)

    monkeypatch.setattr(RemoteSsdProposer, "propose", stop_the_draft_on_round_three)
    result = ssd_run(folder, tmp_path / "run", "--round-timeout-s", "1.5")
    assert_one_line_error(result, "alive but did not answer", "--round-timeout-s 1.5", exit_code=1)
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["status"] == "failed" and "--round-timeout-s" in manifest["reason"]
    assert manifest["config"]["round_timeout_s"] == 1.5
    assert not _alive(stopped[-1]), "the hung draft process was left behind"


def test_the_round_timeout_is_recorded(folder, tmp_path):
    import json

    result = ssd_run(folder, tmp_path / "run")
    assert result.exit_code == 0, result.output
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["config"]["round_timeout_s"] == 120.0 and manifest["ssd"]["round_timeout_s"] == 120.0


@pytest.mark.parametrize("machine", ["aarch64", "ppc64le", ""])
def test_ssd_is_refused_where_stores_may_be_reordered(folder, tmp_path, monkeypatch, machine):
    """The mailbox relies on x86 store order; elsewhere ssd is refused before anything starts (ar and sd still run)."""
    import platform

    from cli_checks import assert_one_line_error

    monkeypatch.setattr(platform, "machine", lambda: machine)
    assert_one_line_error(ssd_run(folder, tmp_path / "run"), "x86", machine or "unknown")
    assert not (tmp_path / "run").exists()
    if machine == "aarch64":
        assert ssd_run(folder, tmp_path / "sd", "--methods", "ar,sd").exit_code == 0
