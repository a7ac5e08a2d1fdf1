"""ssd's channel (speculation/mailbox.py): the same contract whether the payload lives in host shared
memory (CPU runs) or on the verifier's GPU (CUDA IPC); the CUDA case runs only where there is a GPU."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from decode_helpers import decode, sampling_rows
from test_ssd_process import PROMPTS, folder, spec_for, target_model  # noqa: F401 - fixture
from ssdbench.speculation.client import DraftServer, RemoteSsdProposer

NO_CUDA = "no CUDA device here: the GPU channel is checked by ci/gpu_check.sh on a GPU machine"
PAYLOAD_DEVICES = [
    "cpu",
    pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_CUDA)]),
]


class RecordingProposer(RemoteSsdProposer):
    """The real remote proposer, keeping what it read off the channel."""

    def __init__(self, *args) -> None:
        super().__init__(*args)
        self.read = []

    def propose(self, batch):
        proposal = super().propose(batch)
        q = None if proposal.q is None else proposal.q.clone()  # read in place: copy before the next round
        self.read.append((proposal.tokens.clone(), q, proposal.num_proposed.clone()))
        return proposal


def _target_on(folder, device: str):
    return target_model(folder) if device == "cpu" else _cuda_target(folder)


def _cuda_target(folder):
    from ssdbench.models.build import build_native_model
    from ssdbench.models.checkpoint.source import resolve_model
    from ssdbench.models.checkpoint.weights import load_config, load_state_dict

    source = resolve_model(str(folder))
    return build_native_model(load_config(source), load_state_dict(source, dtype=torch.float32), device="cuda")


@pytest.mark.parametrize("payload_device", PAYLOAD_DEVICES)
def test_what_the_verifier_reads_is_what_the_draft_wrote(folder, payload_device):  # noqa: F811
    """Greedy through the channel equals ar; sampled with top-p 0.3 (sparse q-rows), every proposal read is
    consistent: each q-row it proposed from a distribution, each proposed token inside its own row's support (a row read
    stale or from another request would often put it outside)."""
    device = "cuda" if payload_device == "cuda" else "cpu"
    target = _target_on(folder, device)
    prompts = PROMPTS[:2]
    ar, _ = decode(target, None, prompts, max_new_tokens=12, k=0)
    for temperature in (0.0, 0.9):
        base = spec_for(folder)
        spec = dataclasses.replace(base, recipe=dataclasses.replace(base.recipe, device=device))
        with DraftServer(spec, num_rows=2, max_prompt=8, vocab_size=64, with_q=temperature > 0,
                         payload_device=device) as server:
            assert server.box.payload_device.type == device
            proposer = RecordingProposer(server, sampling_rows(2, temperature, 0.3))
            out, steps = decode(target, proposer, prompts, max_new_tokens=12, k=3, temperature=temperature,
                                top_p=0.3, seed=5)
        assert steps and proposer.read
        if temperature == 0:
            assert [r.output_ids for r in out.rows] == [r.output_ids for r in ar.rows]
            continue
        for tokens, q, depth in proposer.read:  # tokens [B, K], q [B, K, V], depth [B]
            assert q is not None and q.device.type == device
            for b in range(tokens.shape[0]):  # rows past a proposal's depth are unused (a short last round)
                for j in range(int(depth[b])):
                    assert abs(float(q[b, j].sum()) - 1.0) < 1e-4 and q[b, j, tokens[b, j]] > 0


@pytest.mark.parametrize("payload_device", PAYLOAD_DEVICES)
def test_the_round_trip_is_measured_and_says_where_the_payload_lives(folder, payload_device):  # noqa: F811
    device = "cuda" if payload_device == "cuda" else "cpu"
    with DraftServer(spec_for(folder), num_rows=1, max_prompt=8, vocab_size=64, with_q=True,
                     payload_device=device) as server:
        rtt = server.round_trip_ms(repeats=5)
        assert server.process.is_alive()
    assert rtt["payload_device"].startswith(device) and rtt["round_trips"] == 5
    assert 0 < rtt["min_ms"] <= rtt["median_ms"] <= rtt["max_ms"]
