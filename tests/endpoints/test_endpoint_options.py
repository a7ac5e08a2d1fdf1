"""--endpoint and friends: malformed input is one line and exit 2, before anything is loaded."""

from __future__ import annotations

import pytest

from ssdbench.endpoints.spec import parse_concurrency, parse_endpoint_plan
from ssdbench.errors import UsageError


def plan(endpoints, launches=(), models=(), **kwargs):
    return parse_endpoint_plan(list(endpoints), list(launches), list(models), **kwargs)


def test_parses_names_urls_models_and_launch_commands():
    parsed = plan(["spec=http://127.0.0.1:8080/v1/", "plain=https://example.org:9000/base"],
                  launches=["spec=llama-server --port 8080"], models=["plain=m1"], concurrency="1,8")
    spec, plain = parsed.endpoints
    assert (spec.name, spec.url, spec.launch, spec.model) == ("spec", "http://127.0.0.1:8080", "llama-server --port 8080",
                                                              None)
    assert (plain.url, plain.model, plain.launch) == ("https://example.org:9000/base", "m1", None)
    assert [(e.name, c) for e, c in parsed.variants()] == [("spec", 1), ("plain", 1), ("spec", 8), ("plain", 8)]


def test_no_endpoint_is_none():
    assert plan([]) is None


@pytest.mark.parametrize("endpoints, launches, models, match", [
    (["nourl"], [], [], "NAME=VALUE"),
    (["a=ftp://x"], [], [], "http:// or https://"),
    (["a=http://user:pw@host:1"], [], [], "no credentials"),
    (["a=http://host:port"], [], [], "port is not a number"),
    (["a=http://h:1", "a=http://h:2"], [], [], "twice"),
    (["9a=http://h:1"], [], [], "a name is a letter"),
    (["a=http://h:1"], ["b=cmd"], [], "no --endpoint b=URL"),
    (["a=http://h:1"], [], ["b=m"], "no --endpoint b=URL"),
    ([], ["a=cmd"], [], "need an --endpoint"),
    (["ar=http://h:1"], [], [], "method's"),
])
def test_bad_options_are_one_line(endpoints, launches, models, match):
    with pytest.raises(UsageError, match=match) as err:
        plan(endpoints, launches, models, reserved=("ar", "sd"))
    assert "\n" not in str(err.value)


def test_endpoint_api_for_all_or_per_name():
    both = ["a=http://h:1", "b=http://h:2"]
    assert [e.api for e in plan(both).endpoints] == ["completions", "completions"]
    assert [e.api for e in plan(both, apis=["chat"]).endpoints] == ["chat", "chat"]
    assert [e.api for e in plan(both, apis=["b=chat"]).endpoints] == ["completions", "chat"]
    assert [e.api for e in plan(both, apis=["chat", "a=completions"]).endpoints] == ["completions", "chat"]
    assert plan(both, apis=["b=chat"]).describe()["endpoints"]["b"]["api"] == "chat"


@pytest.mark.parametrize("apis, match", [
    (["messages"], "must be completions or chat"),
    (["a=generate"], "a: the API must be completions or chat"),
    (["c=chat"], "no --endpoint c=URL"),
    (["a=chat", "a=completions"], "twice"),
])
def test_bad_endpoint_api_is_one_line(apis, match):
    with pytest.raises(UsageError, match=match) as err:
        plan(["a=http://h:1"], apis=apis)
    assert "\n" not in str(err.value)


def test_endpoint_api_without_an_endpoint_is_refused():
    with pytest.raises(UsageError, match="need an --endpoint"):
        plan([], apis=["chat"])


@pytest.mark.parametrize("text", ["0", "1,,2", "a", "-1", "1,1"])
def test_bad_concurrency(text):
    with pytest.raises(UsageError, match="--concurrency"):
        parse_concurrency(text)


def test_timeouts_must_be_positive():
    with pytest.raises(UsageError, match="--request-timeout-s"):
        plan(["a=http://h:1"], request_timeout_s=0)


def test_api_key_comes_from_the_environment_and_is_never_described():
    parsed = plan(["a=http://h:1"], api_key_env="MY_KEY", environ={"MY_KEY": "sk-secret"})
    assert parsed.api_key == "sk-secret"
    assert "sk-secret" not in repr(parsed) and "sk-secret" not in str(parsed.describe())
    launched = plan(["a=http://h:1"], launches=["a=server --api-key sk-secret"], api_key_env="MY_KEY",
                    environ={"MY_KEY": "sk-secret"})
    assert launched.describe()["endpoints"]["a"]["launched_with"] == "server --api-key ***"
    with pytest.raises(UsageError, match="MY_KEY"):
        plan(["a=http://h:1"], api_key_env="MY_KEY", environ={})


def test_ls_lists_the_endpoint_kinds():
    import json

    from typer.testing import CliRunner

    from ssdbench.cli.main import app

    result = CliRunner().invoke(app, ["ls", "--format", "json"])
    assert result.exit_code == 0, result.output
    kinds = {k["name"]: k for k in json.loads(result.output)["endpoint_kinds"]}
    assert set(kinds) == {"llama.cpp", "vllm", "sglang", "tensorrt-llm", "ssdbench", "openai-compatible"}
    assert kinds["vllm"]["acceptance"] == "vllm metrics.speculative_decoding"
    assert "local_build" in kinds["llama.cpp"]
