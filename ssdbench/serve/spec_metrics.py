"""A request's speculation figures, in the shapes the clients of serving engines already read.

Per request (the final chunk's `metrics`, or the whole answer's): vLLM's
`metrics.speculative_decoding` with `--per-request-spec-decode-metrics detailed` (steps, drafts,
accepted, mean acceptance length 1 + accepted / steps, and the per-step counts), which ssdbench's own
endpoint reader reads (endpoints/acceptance.py); ssd's cache hits, misses and backups under
`metrics.ssd` beside it.

For the whole server: /metrics in Prometheus text with vLLM's spec-decode counter names
(`vllm:spec_decode_num_drafts`, `..._num_draft_tokens`, `..._num_accepted_tokens`,
`..._num_accepted_tokens_per_pos{position}`, `vllm:prompt_tokens`, `vllm:generation_tokens`), so a
dashboard built for vLLM reads it, and ssd's counters as `ssdbench:ssd_*`.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from ssdbench.decoding.loop import StepRecord


@dataclass
class RequestSpeculation:
    """One request's rounds, summed: what it drafted and what the target accepted."""

    accepted_per_step: list[int] = field(default_factory=list)  # one per round that verified drafts
    drafted_per_step: list[int] = field(default_factory=list)
    cache_hits: int = 0
    cache_misses: int = 0
    backups: Counter = field(default_factory=Counter)  # how missed rounds were drafted (jit, fast)
    saw_ssd: bool = False

    @classmethod
    def of(cls, steps: list[StepRecord]) -> RequestSpeculation:
        spec = cls()
        for step in steps:
            if step.proposed > 0:  # the drafts it kept: a last round cut by max_tokens or EOS keeps fewer
                spec.accepted_per_step.append(min(step.accepted, step.emitted))
                spec.drafted_per_step.append(step.proposed)
            if "cache_hit" in step.extras:
                spec.saw_ssd = True
                hit = bool(step.extras["cache_hit"])
                spec.cache_hits += hit
                spec.cache_misses += not hit
                backup = step.extras.get("backup")
                if backup:
                    spec.backups[backup] += 1
        return spec

    @property
    def steps(self) -> int:
        return len(self.accepted_per_step)

    def as_metrics(self) -> dict | None:
        """The answer's `metrics` object; None for a method that drafted nothing (ar)."""
        if not self.steps and not self.saw_ssd:
            return None
        accepted = sum(self.accepted_per_step)
        metrics = {"speculative_decoding": {
            "num_spec_steps": self.steps, "num_draft_tokens": sum(self.drafted_per_step),
            "num_accepted_draft_tokens": accepted,
            "mean_acceptance_length": 1 + accepted / self.steps if self.steps else 1.0,
            "per_step_accepted": list(self.accepted_per_step), "per_step_drafted": list(self.drafted_per_step)}}
        if self.saw_ssd:
            metrics["ssd"] = {"cache_hits": self.cache_hits, "cache_misses": self.cache_misses,
                              "backups": dict(self.backups)}
        return metrics


class ServerCounters:
    """The server's Prometheus counters, in a registry of its own (no process-wide state)."""

    def __init__(self, model: str | None, max_positions: int) -> None:
        from prometheus_client import CollectorRegistry, Counter as PromCounter, Gauge

        self.registry = CollectorRegistry()
        labels = ["model_name"]

        def counter(name: str, doc: str, extra: tuple[str, ...] = ()) -> PromCounter:
            return PromCounter(name, doc, labels + list(extra), registry=self.registry)

        self._model = model or ""
        self._positions = max_positions
        self.requests = counter("ssdbench:requests", "Requests answered, by finish reason", ("finished_reason",))
        self.prompt_tokens = counter("vllm:prompt_tokens", "Prompt tokens prefilled")
        self.generation_tokens = counter("vllm:generation_tokens", "Tokens generated")
        self.drafts = counter("vllm:spec_decode_num_drafts", "Verify steps that checked drafts")
        self.draft_tokens = counter("vllm:spec_decode_num_draft_tokens", "Draft tokens proposed")
        self.accepted = counter("vllm:spec_decode_num_accepted_tokens", "Draft tokens accepted")
        self.per_position = counter("vllm:spec_decode_num_accepted_tokens_per_pos",
                                    "Draft tokens accepted at each draft position", ("position",))
        self.hits = counter("ssdbench:ssd_cache_hits", "ssd rounds whose proposal was in the speculation cache")
        self.misses = counter("ssdbench:ssd_cache_misses", "ssd rounds that missed the speculation cache")
        self.backups = counter("ssdbench:ssd_backups", "ssd missed rounds by how they were drafted", ("backup",))
        self.running = Gauge("ssdbench:num_requests_running", "Requests being decoded", labels,
                             registry=self.registry)
        self.waiting = Gauge("ssdbench:num_requests_waiting", "Requests queued", labels, registry=self.registry)
        if model:
            self.rename(model)

    def rename(self, model: str) -> None:
        """The model label, once the model is known; the counters (every draft position's too) exist at 0 from
        then on, as vLLM's do, so a client reading /metrics before the first request finds them."""
        self._model = model
        for counter in (self.prompt_tokens, self.generation_tokens, self.drafts, self.draft_tokens, self.accepted,
                        self.hits, self.misses):
            counter.labels(model)
        for position in range(self._positions):
            self.per_position.labels(model, str(position))

    def count_request(self, *, reason: str, prompt_tokens: int, generated: int, spec: RequestSpeculation) -> None:
        model = self._model
        self.requests.labels(model, reason).inc()
        self.prompt_tokens.labels(model).inc(prompt_tokens)
        self.generation_tokens.labels(model).inc(generated)
        if spec.steps:
            self.drafts.labels(model).inc(spec.steps)
            self.draft_tokens.labels(model).inc(sum(spec.drafted_per_step))
            self.accepted.labels(model).inc(sum(spec.accepted_per_step))
            for accepted in spec.accepted_per_step:
                for position in range(accepted):
                    self.per_position.labels(model, str(position)).inc()
        if spec.saw_ssd:
            self.hits.labels(model).inc(spec.cache_hits)
            self.misses.labels(model).inc(spec.cache_misses)
            for backup, n in spec.backups.items():
                self.backups.labels(model, backup).inc(n)

    def set_load(self, *, running: int, waiting: int) -> None:
        self.running.labels(self._model).set(running)
        self.waiting.labels(self._model).set(waiting)

    def exposition(self) -> bytes:
        from prometheus_client import generate_latest

        return generate_latest(self.registry)
