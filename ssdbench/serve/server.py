"""One `ssdbench serve` from start to stop: claim the records folder, answer 503 while the models load,
serve, and on SIGINT/SIGTERM stop taking requests, let those in flight finish for up to --grace-s,
end the rest, write the records and stop ssd's draft process.

uvicorn serves the Starlette app on the main thread and owns the signals (its graceful shutdown
closes the listening socket first, then waits for open connections). The models are built, and
every batch decoded, on the engine's thread, so the server answers /health with 503 from the first
second; the run's own pieces do the work: ModelSet, the method's proposers (ssd's draft process),
the pinned placement, the round loop and the Recorder, whose tables `report`, `compare` and `export`
read as they read a run's.
"""

from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass
from pathlib import Path

from ssdbench.decoding.recorder import Recorder
from ssdbench.decoding.workload import Workload
from ssdbench.run.plan import RunPlan
from ssdbench.serve.app import ServerState, build_app
from ssdbench.serve.engine import POLICY, SUITE, Engine, EngineParts
from ssdbench.serve.openai_request import ApiError, Defaults
from ssdbench.serve.spec_metrics import ServerCounters


NO_LIMIT_POSITIONS = 32768  # a model that declares no context: what one request may fill


@dataclass(frozen=True)
class ServeOptions:
    host: str = "127.0.0.1"
    port: int = 8000
    max_batch: int = 1
    model_name: str | None = None  # what /v1/models names; default: the target's name
    greedy_only: bool = False
    grace_s: float = 30.0
    log_level: str = "warning"


def serve(plan: RunPlan, options: ServeOptions, *, on_event=print) -> Path:
    """Serve until a signal; returns the records folder. Bad models are refused (one line, exit 2) before the
    records folder is claimed or the port opened; a failure while loading stops the server."""
    import prometheus_client
    import uvicorn

    from ssdbench.records.writer import RunWriter, default_run_dir, new_run_id, stop_reason

    prometheus_client.disable_created_metrics()  # vLLM's /metrics has no `_created` series either
    models, limit = _checked_models(plan)
    method = plan.methods[0]
    run_id = new_run_id()
    path = plan.out or default_run_dir(run_id=run_id)
    counters = ServerCounters(options.model_name, plan.decode.k)
    state = ServerState(model=options.model_name or "", created=int(time.time()), counters=counters,
                        version={"version": f"ssdbench {_package_version()}", "method": method.name,
                                 "dtype": plan.models.dtype})
    recorder = Recorder(run_id=run_id)
    engine = Engine(max_batch=options.max_batch, recorder=recorder, counters=counters)
    state.engine = engine
    manifest = {"config": plan.settings.to_dict(), "serve": {**_describe(options), "method": method.name, **POLICY}}
    loaded: dict = {}
    config = uvicorn.Config(build_app(state), host=options.host, port=options.port, log_level=options.log_level,
                            timeout_graceful_shutdown=math.ceil(options.grace_s), lifespan="off")
    server = uvicorn.Server(config)
    with RunWriter.create(path, run_id, manifest) as writer:
        engine.start(lambda stack: _prepare(plan, options, state, models, limit, recorder, stack, loaded),
                     on_ready=lambda: _ready(state, options, on_event),
                     on_failure=lambda: setattr(server, "should_exit", True))
        stopped_by = "the server exited"
        try:
            server.run()
        except KeyboardInterrupt as err:  # uvicorn's graceful shutdown re-raises the signal it caught: the usual end
            stopped_by = f"signal ({str(err) or 'SIGINT'})"
        finally:
            engine.stop(grace_s=0)  # uvicorn has waited --grace-s for open requests; the rest end now
        facts = {**loaded.get("manifest", {}), "suite": _served_suite(recorder), "stopped_by": stopped_by,
                 "kernels": {**loaded.get("kernels", {}), **recorder.kernels}}
        if engine.error is not None:  # marked failed, keeping what was served (as a partial run), and reported
            writer.fail(*stop_reason(engine.error), steps_cols=recorder.steps, requests_cols=recorder.requests,
                        extra_manifest=facts)
            raise engine.error
        writer.finish(recorder.steps, recorder.requests, [], facts)
    return writer.path


def _checked_models(plan: RunPlan):
    """The model set, resolved and checked as `run` checks it (paths, vocabularies, weight headers, the context)
    without loading weights; (models, context limit)."""
    from ssdbench.profiling.devices import make_current
    from ssdbench.models.model_set import ModelSet
    from ssdbench.run.model_checks import check_models

    make_current(plan.models.device)
    models = ModelSet(plan.models)
    try:
        return models, check_models(plan, models)
    except BaseException:
        models.close()
        raise


def _package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ssdbench")
    except PackageNotFoundError:
        return "unknown"


def _served_suite(recorder: Recorder) -> dict:
    """The manifest's suite: the requests the server answered, each its own prompt (for `export`)."""
    prompt_ids = list(dict.fromkeys(recorder.requests.get("prompt_id", [])))
    return {"name": SUITE, "source": "requests to the server", "prompt_ids": prompt_ids,
            "categories": {pid: SUITE for pid in prompt_ids}}


def _describe(options: ServeOptions) -> dict:
    return {"host": options.host, "port": options.port, "max_batch": options.max_batch,
            "greedy_only": options.greedy_only, "grace_s": options.grace_s}


def _ready(state: ServerState, options: ServeOptions, on_event) -> None:
    state.ready = True
    on_event(f"ready: serving '{state.model}' at http://{options.host}:{options.port}/v1")


def _prepare(plan: RunPlan, options: ServeOptions, state: ServerState, models, limit: int | None,
             recorder: Recorder, stack: contextlib.ExitStack, loaded: dict) -> EngineParts:
    """On the engine's thread: open the method's proposers (ssd's draft process starts before the target pins
    itself, as in `run`), pin, load the models on first use, and tell the routes what they need."""
    import torch

    from ssdbench.profiling.placement import pinned
    from ssdbench.run.session import base_manifest
    from ssdbench.suites.chat import as_id_list

    stack.callback(models.close)
    method = plan.methods[0]
    positions = limit or NO_LIMIT_POSITIONS
    workload = _capacity_workload(models.eos_ids, positions)
    ctx = plan.method_context("native", models, workload, recorder)
    factory = stack.enter_context(method.proposers(ctx))
    stack.enter_context(pinned(plan.pinned))
    if plan.threads:
        torch.set_num_threads(plan.threads)
    tokenizer = models.tokenizer
    state.model = options.model_name or models.target_source.name
    if not options.model_name:
        state.counters.rename(state.model)
    state.vocab_size = models.vocab_size
    state.tokenize = lambda text: as_id_list(tokenizer(text))
    state.template = lambda messages: _templated(tokenizer, messages)
    state.defaults = Defaults(model=state.model, max_tokens=plan.decode.max_new_tokens,
                              temperature=plan.decode.target.temperature, top_p=plan.decode.target.top_p,
                              context_positions=positions, slack=method.draft_slack(plan.decode.k) + 2,
                              greedy_only=options.greedy_only)
    loaded["manifest"] = {**base_manifest(plan, models, workload, {"name": SUITE}),
                          "model_hashes": models.weight_hashes()}
    loaded["kernels"] = models.kernels_used()
    return EngineParts(method=method.name, target=models.target("native"), factory=factory,
                       uses_draft=method.uses_draft, k=plan.decode.k, eos_ids=models.eos_ids,
                       detokenize=lambda ids: tokenizer.decode(ids, skip_special_tokens=True),
                       base_seed=plan.decode.seed)


def _templated(tokenizer, messages: list[dict]) -> list[int]:
    """A chat request's prompt ids: the messages in the tokenizer's chat template, ending with the assistant's turn."""
    from ssdbench.suites.chat import as_id_list

    if not getattr(tokenizer, "chat_template", None):
        raise ApiError(400, "this model has no chat template: send the prompt to /v1/completions", param="messages")
    return as_id_list(tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True))


def _capacity_workload(eos_ids: frozenset[int], positions: int) -> Workload:
    """A server's prompts are not known in advance: a stand-in whose one prompt is as long as the context
    sizes what a method allocates once for the whole server (ssd's shared-memory mailbox)."""
    return Workload(suite=SUITE, prompt_ids=("(the longest prompt a request may send)",),
                    token_ids=((0,) * positions,), eos_ids=eos_ids)


