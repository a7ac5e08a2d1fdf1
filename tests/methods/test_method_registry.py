"""A method is one module declaring a `METHOD` plus a registry line: everything else reads the registry."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from ssdbench.cli.main import app
from ssdbench.decoding.ngram import NgramProposer
from ssdbench.methods import registry
from ssdbench.methods.base import Method, one_factory

runner = CliRunner()

# a method declared the new way, in the test: sd's n-gram proposer with a K of its own
LOOKUP2 = Method(name="lookup2", summary="prompt lookup, two tokens a round", draft_slack=lambda k: 2,
                 proposers=lambda ctx: one_factory(lambda num_rows, generator: NgramProposer(k=2)),
                 describe=lambda ctx: {"k": 2})


@pytest.fixture
def with_lookup2(monkeypatch):
    monkeypatch.setitem(registry.METHODS, LOOKUP2.name, LOOKUP2)


def test_a_registered_method_runs_is_recorded_and_listed(with_lookup2, tiny, tmp_path):
    out = tmp_path / "run"
    result = runner.invoke(app, ["run", "--target", str(tiny), "--suite", "smoke", "--num-prompts", "2",
                                 "--max-new-tokens", "8", "--no-chat-template", "--methods", "ar,lookup2",
                                 "--out", str(out)])
    assert result.exit_code == 0, result.output
    requests = pq.read_table(out / "requests.parquet").to_pandas()
    by_method = {m: list(map(list, g.sort_values("request_idx")["output_token_ids"]))
                 for m, g in requests.groupby("method")}
    assert by_method["lookup2"] == by_method["ar"]  # exact: the shared loop verifies whatever is proposed
    assert json.loads((out / "manifest.json").read_text())["lookup2"] == {"k": 2}
    listing = runner.invoke(app, ["ls", "--format", "json"])
    assert {"name": "lookup2", "note": LOOKUP2.summary} in json.loads(listing.stdout)["methods"]


def test_an_unknown_method_is_one_line_with_the_closest_name(tiny, tmp_path):
    result = runner.invoke(app, ["run", "--target", str(tiny), "--methods", "ar,sdd", "--out", str(tmp_path / "r")])
    assert result.exit_code == 2
    assert "unknown value 'sdd'" in result.output and "did you mean" in result.output


def test_placements_and_the_ssd_policy_are_resolved_once_per_run(tiny, tmp_path, monkeypatch):
    """The run plan resolves them; nothing below it derives them again."""
    import ssdbench.run.plan as plan

    calls = {"placements": 0, "ssd_policy": 0}
    for name in calls:
        original = getattr(plan, name)

        def counted(*args, _name=name, _original=original, **kwargs):
            calls[_name] += 1
            return _original(*args, **kwargs)

        monkeypatch.setattr(plan, name, counted)
    result = runner.invoke(app, ["run", "--target", str(tiny), "--suite", "smoke", "--num-prompts", "1",
                                 "--max-new-tokens", "4", "--no-chat-template", "--methods", "ar,sd,ssd",
                                 "--out", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    assert calls == {"placements": 1, "ssd_policy": 1}
