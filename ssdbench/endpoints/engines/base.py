"""What ssdbench knows of one serving engine, declared in one place: its engine file's `ENGINE`.

Everything engine-specific lives in the declaration; the code above it (preflight, the runner, the
checks, the summary, `ssdbench ls`) asks the registry and names no engine. What may be declared:
- who it is: `name` (the kind the manifest records) and the `owned_by` names its `/v1/models` gives;
- what each request adds to its body (`request_fields`, and a fresh `cache_salt` where it takes one);
- how a response's per-request acceptance is read (`readers`: one per shape it sends, each a source
  label and a function of one JSON event that returns an `Acceptance`, or None where the event does not
  carry the shape), and what its own definitions say of the figures (`figure_checks`);
- the speculation counters its `/metrics` exposes (`counters`), the acceptance fallback;
- where it describes itself for preflight (`self_report_route`, `version_key`, `dtype_of`);
- what `ssdbench ls` and the summary say of it (`note`, `no_steps_note`, `length_phrase`, `local_build`).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from ssdbench.endpoints.acceptance import Acceptance
from ssdbench.endpoints.counters import CounterNames

Reader = Callable[[dict], "Acceptance | None"]


@dataclass(frozen=True)
class Engine:
    name: str
    owned_by: tuple[str, ...] = ()  # what the server puts in /v1/models `owned_by`, lower case
    acceptance_source: str = "none"  # where its per-request acceptance comes from, as `ls` and the manifest say
    note: str = ""  # one paragraph for `ssdbench ls`
    readers: tuple[tuple[str, Reader], ...] = ()  # (source, read one event), for each shape its responses carry
    read_last: bool = False  # its shape is tried after every other engine's (a bare rate, which richer ones beat)
    request_fields: dict = field(default_factory=dict)  # added to every completion request
    salts_prefix_cache: bool = False  # a fresh `cache_salt` per request keeps its prefix cache from hitting
    counters: CounterNames | None = None  # its speculation counters on GET /metrics, where it has them
    self_report_route: str | None = None  # the route where it describes itself (`/props`, `/version`)
    version_key: str | None = None  # the key of its version in that route's answer
    dtype_of: Callable[[object, str | None], str | None] | None = None  # (self-report, /metrics text) -> its dtype
    figure_checks: Callable[[Acceptance], list[str]] | None = None  # contradictions by its own definitions
    no_steps_note: str | None = None  # why its figures carry no acceptance length, for the summary
    length_phrase: str | None = None  # what its acceptance length is per, where not "per drafted step"
    local_build: Callable[[], str] | None = None  # where `ls` finds a local build of it

    def fields_for_request(self) -> dict:
        """The fields one request adds to its body: the engine's own, and a salt of its own where it takes one."""
        salt = {"cache_salt": uuid.uuid4().hex} if self.salts_prefix_cache else {}
        return {**self.request_fields, **salt}

    @property
    def sources(self) -> tuple[str, ...]:
        """The acceptance sources its readers record."""
        return tuple(source for source, _ in self.readers)
