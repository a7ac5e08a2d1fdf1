"""Every request of every endpoint variant, sent, timed and recorded.

A variant is one endpoint at one concurrency (engine `endpoint-cN`). At concurrency 1 it takes its
turn in the run's schedule like a method (`run(repeat, idx)`: the same order rules); at N > 1 all its
requests go at once through a client that keeps at most N in flight (a pool of N threads, each
request timed on its own) after the schedule. A failed request is recorded as failed with its reason
and the run goes on; once an endpoint refuses connections, its remaining requests are recorded as not
sent instead of each waiting for a timeout.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field

from ssdbench.decoding.recorder import Recorder, RequestKey
from ssdbench.decoding.workload import WARMUP_TOKENS, DecodeSettings, Workload
from ssdbench.endpoints.consistency import request_acceptance
from ssdbench.endpoints.counter_acceptance import counted, joined
from ssdbench.endpoints.counters import SpecCounters
from ssdbench.endpoints.engines.registry import counters_in, engine_named
from ssdbench.endpoints.preflight import PROBE_TIMEOUT_S, ServerInfo
from ssdbench.endpoints.records import Tokenize, record_failure, record_success
from ssdbench.endpoints.spec import Endpoint, EndpointPlan, engine_label
from ssdbench.endpoints.wire.http import RequestFailed, get_text
from ssdbench.endpoints.wire.request import Completion, Sampling, stream_chat, stream_completion
from ssdbench.suites.chat import chat_messages

DOWN_MARKERS = ("connection refused", "cannot resolve")
COUNTER_REREADS = 10  # at 50 ms: how long a server may take to count a finished request's last tokens


@dataclass(frozen=True)
class Prompt:
    token_ids: list[int]  # what the completions API sends
    text: str  # what the chat API sends, as the first user turn


def measured_prompt(workload: Workload, i: int) -> Prompt:
    return Prompt(list(workload.token_ids[i]), workload.texts[i] if i < len(workload.texts) else "")


def warm_up_prompt(workload: Workload) -> Prompt:
    """The warm-up's prompt: the first prompt's ids (and words, for chat) in reverse order, a prompt that is not
    measured: as long as the first and made of its tokens, but starting unlike it (unless it reads the same both
    ways), so what the warm-up leaves in a prefix cache is no measured prompt's beginning. The engines that allow
    it also keep every request out of the prefix cache (their `Engine.request_fields`)."""
    first = measured_prompt(workload, 0)
    return Prompt(first.token_ids[::-1], " ".join(reversed(first.text.split())))


@dataclass(frozen=True)
class EndpointVariant:
    endpoint: Endpoint
    server: ServerInfo
    concurrency: int

    @property
    def key(self) -> tuple[str, str]:
        return self.endpoint.name, engine_label(self.concurrency)

    @property
    def label(self) -> str:
        return f"{self.endpoint.name}@{engine_label(self.concurrency)}"


@dataclass
class EndpointRun:
    """The endpoints of a run once probed (and launched): what the run layer hands the runner."""

    plan: EndpointPlan
    servers: dict[str, ServerInfo]
    logs: dict[str, str] = field(default_factory=dict)  # name -> log file of a launched server

    def variants(self) -> list[EndpointVariant]:
        return [EndpointVariant(e, self.servers[e.name], c) for e, c in self.plan.variants()]

    def describe(self) -> dict:
        described = self.plan.describe()
        for name, info in described["endpoints"].items():
            info.update(self.servers[name].describe())
            # where this kind reports acceptance when it speculates; what each request carried is in endpoints.parquet
            info["acceptance_source_if_speculating"] = engine_named(self.servers[name].kind).acceptance_source
            if name in self.logs:
                info["launch_log"] = self.logs[name]
        return described


class EndpointRunner:
    """Sends one variant's requests and records them."""

    def __init__(self, variant: EndpointVariant, run: EndpointRun, workload: Workload, decode: DecodeSettings,
                 recorder: Recorder, tokenize: Tokenize) -> None:
        self.variant, self.run_plan, self.workload, self.decode = variant, run.plan, workload, decode
        self.recorder, self.tokenize = recorder, tokenize
        self.down_reason: str | None = None

    def warm_up(self) -> None:
        """One short unrecorded request, so the first recorded one pays no connection or graph set-up. Its prompt
        is none of the measured ones (`warm_up_prompt`), so no measured request finds it in a prefix cache."""
        try:
            self._send(warm_up_prompt(self.workload), seed=self.decode.seed, max_new_tokens=WARMUP_TOKENS)
        except RequestFailed as err:
            self.down_reason = self.down_reason or _down(err)

    def run(self, repeat: int, idx: list[int]) -> None:
        """Requests one after another (concurrency 1), in the schedule's turn."""
        for i in idx:
            self._record(repeat, i, *self._attempt(repeat, i))

    def run_concurrent(self, units: list[tuple[int, int]], advance) -> None:
        """All (repeat, request) units with at most `concurrency` in flight; recorded as they finish."""
        with ThreadPoolExecutor(max_workers=self.variant.concurrency, thread_name_prefix="endpoint") as pool:
            futures = {pool.submit(self._attempt, repeat, i): (repeat, i) for repeat, i in units}
            try:
                for future in as_completed(futures):
                    repeat, i = futures[future]
                    self._record(repeat, i, *future.result())
                    advance(1)
            except BaseException:
                pool.shutdown(wait=False, cancel_futures=True)
                raise

    def _attempt(self, repeat: int, i: int) -> tuple[int, Completion | None, str | None]:
        """(wall-clock start, completion, error): never raises for a failed request."""
        t_start_ns = time.time_ns()
        if self.down_reason is not None:
            return t_start_ns, None, f"not sent: {self.down_reason}"
        try:
            completion = self._send(measured_prompt(self.workload, i), seed=self.decode.request_seed(i, repeat),
                                    max_new_tokens=self.decode.max_new_tokens)
        except RequestFailed as err:
            self.down_reason = self.down_reason or _down(err)
            return t_start_ns, None, str(err)
        return t_start_ns, completion, None

    def _send(self, prompt: Prompt, *, seed: int, max_new_tokens: int) -> Completion:
        target = self.decode.target
        sampling = Sampling(max_new_tokens=max_new_tokens, temperature=target.temperature, top_p=target.top_p,
                            seed=seed, ignore_eos=self.decode.ignore_eos)
        server = self.variant.server
        reads_counters = server.counters is not None and self.variant.concurrency == 1
        before = self._read_counters() if reads_counters else None
        completion = self._stream(prompt, sampling)
        if reads_counters:
            self._add_counted_acceptance(completion, before, self._read_counters_after(before, completion))
        return completion

    def _stream(self, prompt: Prompt, sampling: Sampling) -> Completion:
        endpoint, server = self.variant.endpoint, self.variant.server
        common = {"timeout_s": self.run_plan.request_timeout_s, "api_key": self.run_plan.api_key,
                  "read_acceptance": request_acceptance,
                  "extra": engine_named(server.kind).fields_for_request()}  # a fresh cache salt per request (vLLM)
        if endpoint.api == "chat":
            return stream_chat(endpoint.url, server.model, chat_messages(prompt.text), sampling, **common)
        return stream_completion(endpoint.url, server.model, prompt.token_ids, sampling, **common)

    def _read_counters(self) -> SpecCounters | str:
        """The server's speculation counters now, or why they could not be read."""
        family = self.variant.server.counters.family
        try:
            text = get_text(self.variant.endpoint.url, "/metrics", timeout_s=PROBE_TIMEOUT_S,
                            api_key=self.run_plan.api_key)
        except RequestFailed as err:
            return f"/metrics ({family}) not read: {err}"
        return counters_in(text) or f"/metrics ({family}) not read: its speculation counters are gone"

    def _read_counters_after(self, before: SpecCounters | str, completion: Completion) -> SpecCounters | str:
        """The counters once they include the request: a server may add its last tokens a moment after the
        stream ends (llama-server does so before it answers the next /metrics; vLLM's loggers may lag)."""
        tokens = (completion.usage or {}).get("completion_tokens")
        after = self._read_counters()
        for _ in range(COUNTER_REREADS):
            if isinstance(before, str) or isinstance(after, str) or not isinstance(tokens, int) \
                    or before.problem or after.problem or after.generated - before.generated >= tokens:
                break
            time.sleep(0.05)
            after = self._read_counters()
        return after

    @staticmethod
    def _add_counted_acceptance(completion: Completion, before: SpecCounters | str, after: SpecCounters | str) -> None:
        """The counters' difference joined to what the response itself carried (counter_acceptance)."""
        if isinstance(before, str) or isinstance(after, str):
            reading, note = None, before if isinstance(before, str) else after
        else:
            tokens = (completion.usage or {}).get("completion_tokens")
            reading, note = counted(before, after, tokens if isinstance(tokens, int) else None)
        completion.acceptance, completion.acceptance_note = joined(completion.acceptance, reading, note)

    def _record(self, repeat: int, i: int, t_start_ns: int, completion: Completion | None, error: str | None) -> None:
        name, engine = self.variant.key
        key = RequestKey(name, engine, self.workload.suite, self.workload.prompt_ids[i], i, repeat)
        common = {"concurrency": self.variant.concurrency, "url": self.variant.endpoint.url, "t_start_ns": t_start_ns}
        if completion is None:
            record_failure(self.recorder, key, error=error or "unknown", **common)
            return
        record_success(self.recorder, key, completion, prompt_ids=list(self.workload.token_ids[i]),
                       seed=self.decode.request_seed(i, repeat), temperature=self.decode.target.temperature,
                       tokenize=self.tokenize, **common)


def _down(err: RequestFailed) -> str | None:
    """The reason to stop sending to an endpoint: it no longer accepts connections."""
    text = str(err)
    return text if any(marker in text for marker in DOWN_MARKERS) else None


def failures(recorder: Recorder) -> list[str]:
    """`label: reason` for each failed endpoint request of the run."""
    table = recorder.endpoints
    if not table:
        return []
    rows = zip(table["method"], table["engine"], table["status"], table["error"])
    return [f"{method}@{engine}: {error}" for method, engine, status, error in rows if status != "ok"]
