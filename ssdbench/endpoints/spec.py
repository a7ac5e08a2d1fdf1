"""What the user asked of the endpoints: names, URLs, launch commands, the API, concurrency, timeouts.

Parsed from the command line without any network, so a malformed option is one line (exit 2) before
anything is loaded or claimed. The API key is read from an environment variable named by
`--endpoint-api-key-env`, never taken from the command line; it is never recorded.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

from ssdbench.errors import UsageError

NAME_PATTERN = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,39}$")
DEFAULT_TIMEOUT_S = 300.0
DEFAULT_READY_TIMEOUT_S = 300.0
APIS = ("completions", "chat")  # /v1/completions with the methods' token ids; /v1/chat/completions with messages
ENGINE_PREFIX = "endpoint-c"  # a variant's engine: endpoint-c1, endpoint-c8 (its concurrency)


@dataclass(frozen=True)
class Endpoint:
    name: str
    url: str  # base URL without credentials or a trailing slash, e.g. http://127.0.0.1:8080
    model: str | None = None  # None: the one model the server lists
    launch: str | None = None  # a shell command that starts the server (--endpoint-launch)
    api: str = "completions"  # completions (the methods' token ids) or chat (messages the server templates)

    def describe(self) -> dict:
        return {"url": self.url, "model_requested": self.model, "launched_with": self.launch, "api": self.api}


@dataclass(frozen=True)
class EndpointPlan:
    endpoints: tuple[Endpoint, ...]
    concurrency: tuple[int, ...] = (1,)
    request_timeout_s: float = DEFAULT_TIMEOUT_S
    ready_timeout_s: float = DEFAULT_READY_TIMEOUT_S
    api_key_env: str | None = None
    api_key: str | None = field(default=None, repr=False)  # read from the environment; never recorded

    def variants(self) -> list[tuple[Endpoint, int]]:
        """(endpoint, concurrency) pairs in run order."""
        return [(e, c) for c in self.concurrency for e in self.endpoints]

    def describe(self) -> dict:
        """For the manifest; the API key, should a launch command hold it too, is masked there."""
        endpoints = {e.name: e.describe() for e in self.endpoints}
        for info in endpoints.values():
            if self.api_key and info["launched_with"]:
                info["launched_with"] = info["launched_with"].replace(self.api_key, "***")
        return {"endpoints": endpoints, "concurrency": list(self.concurrency),
                "request_timeout_s": self.request_timeout_s, "api_key_env": self.api_key_env,
                "api_key": "given (not recorded)" if self.api_key else None}


def engine_label(concurrency: int) -> str:
    return f"{ENGINE_PREFIX}{concurrency}"


def parse_endpoint_plan(endpoints: list[str], launches: list[str], models: list[str], *, apis: list[str] = (),
                        concurrency: str = "1",
                        request_timeout_s: float = DEFAULT_TIMEOUT_S, ready_timeout_s: float = DEFAULT_READY_TIMEOUT_S,
                        api_key_env: str | None = None, environ: dict | None = None,
                        reserved: tuple[str, ...] = ()) -> EndpointPlan | None:
    """The endpoints of a run, or None when none was given. `reserved`: names taken by methods."""
    if not endpoints:
        if launches or models or apis:
            raise UsageError("--endpoint-launch, --endpoint-model and --endpoint-api need an --endpoint NAME=URL")
        return None
    urls = _pairs("--endpoint", endpoints)
    launch_of = _pairs("--endpoint-launch", launches)
    model_of = _pairs("--endpoint-model", models)
    default_api, api_of = parse_apis(list(apis))
    for flag, given in (("--endpoint-launch", launch_of), ("--endpoint-model", model_of), ("--endpoint-api", api_of)):
        unknown = sorted(set(given) - set(urls))
        if unknown:
            raise UsageError(f"{flag} {unknown[0]}: no --endpoint {unknown[0]}=URL names that endpoint")
    for name in urls:
        if name in reserved:
            raise UsageError(f"--endpoint {name}: the name is a method's; choose another")
    _check_positive_s("--request-timeout-s", request_timeout_s)
    _check_positive_s("--endpoint-ready-timeout-s", ready_timeout_s)
    return EndpointPlan(
        endpoints=tuple(Endpoint(name, _clean_url(name, url), model_of.get(name), launch_of.get(name),
                                 api_of.get(name, default_api)) for name, url in urls.items()),
        concurrency=parse_concurrency(concurrency), request_timeout_s=request_timeout_s,
        ready_timeout_s=ready_timeout_s, api_key_env=api_key_env, api_key=_api_key(api_key_env, environ))


def parse_apis(items: list[str]) -> tuple[str, dict[str, str]]:
    """(the API of every endpoint not named, {name: its API}) from `--endpoint-api API` and
    `--endpoint-api NAME=API` (repeatable); completions unless told otherwise."""
    default, named = APIS[0], []
    for item in items:
        if "=" in item:
            named.append(item)
            continue
        if item.strip() not in APIS:
            raise UsageError(f"--endpoint-api must be {' or '.join(APIS)} (or NAME=API), got '{item}'")
        default = item.strip()
    per_name = _pairs("--endpoint-api", named)
    for name, api in per_name.items():
        if api not in APIS:
            raise UsageError(f"--endpoint-api {name}: the API must be {' or '.join(APIS)}, got '{api}'")
    return default, per_name


def parse_concurrency(text: str) -> tuple[int, ...]:
    values = []
    for part in (p.strip() for p in str(text).split(",")):
        if not part.isdigit() or int(part) < 1:
            raise UsageError(f"--concurrency must be a comma list of positive integers, got '{text}'")
        values.append(int(part))
    if len(set(values)) != len(values):
        raise UsageError(f"--concurrency lists a level twice: '{text}'")
    return tuple(values)


def _pairs(flag: str, items: list[str]) -> dict[str, str]:
    pairs: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        name, value = name.strip(), value.strip()
        if not sep or not value:
            raise UsageError(f"{flag} expects NAME=VALUE, got '{item}'")
        if not NAME_PATTERN.match(name):
            raise UsageError(f"{flag} {name}: a name is a letter then letters, digits, '_', '.' or '-' (at most 40)")
        if name in pairs:
            raise UsageError(f"{flag} names '{name}' twice")
        pairs[name] = value
    return pairs


def _clean_url(name: str, url: str) -> str:
    """The base URL as recorded: http(s) only, credentials refused (they belong in the key's env variable)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"--endpoint {name}: expected an http:// or https:// URL, got '{url}'")
    if parts.username or parts.password:
        raise UsageError(f"--endpoint {name}: put no credentials in the URL; name an environment variable "
                         "holding the API key with --endpoint-api-key-env")
    try:
        parts.port  # noqa: B018 - a malformed port raises here
    except ValueError:
        raise UsageError(f"--endpoint {name}: the URL's port is not a number: '{url}'") from None
    path = parts.path.rstrip("/").removesuffix("/v1")  # the API's paths are added per request
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def _api_key(env_name: str | None, environ: dict | None) -> str | None:
    if env_name is None:
        return None
    import os

    value = (os.environ if environ is None else environ).get(env_name)
    if not value:
        raise UsageError(f"--endpoint-api-key-env {env_name}: that environment variable is not set")
    return value


def _check_positive_s(flag: str, value: float) -> None:
    if not value > 0 or value != value or value == float("inf"):
        raise UsageError(f"{flag} must be a positive number of seconds, got {value}")
