"""The endpoints' part of a run, as one `with` block: launch what is to be launched, probe every
endpoint (down, wrong model: one line, before anything is claimed), and stop the launched servers
when the block ends, however it ends."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path

from ssdbench.endpoints.launch import launched
from ssdbench.endpoints.preflight import probe
from ssdbench.endpoints.runner import EndpointRun
from ssdbench.endpoints.spec import EndpointPlan


def launch_log_dir() -> Path:
    from ssdbench.cache import cache_root

    return cache_root() / "endpoint-logs"


@contextlib.contextmanager
def endpoints_ready(plan: EndpointPlan, *, log_dir: Path | None = None) -> Iterator[EndpointRun]:
    logs: dict[str, str] = {}
    with contextlib.ExitStack() as stack:
        for endpoint in plan.endpoints:
            if endpoint.launch is None:
                continue
            log = (log_dir or launch_log_dir()) / f"{endpoint.name}-{time.strftime('%Y%m%dT%H%M%S')}.log"
            stack.enter_context(launched(endpoint, log, ready_timeout_s=plan.ready_timeout_s))
            logs[endpoint.name] = str(log)
        servers = {e.name: probe(e, api_key=plan.api_key) for e in plan.endpoints}
        yield EndpointRun(plan=plan, servers=servers, logs=logs)
