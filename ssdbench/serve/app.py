"""The server's routes, on Starlette: `/v1/completions` and `/v1/chat/completions` (streamed over SSE
or whole), `/v1/models`, `/health`, `/metrics` and `/version`.

Until the models are loaded and warmed up every route but /metrics answers 503; so does a completion
once the server is stopping. A streamed request whose client disconnects is ended by the engine at
its next round (Starlette cancels the stream; its `finally` marks the ticket gone); a whole answer's
handler checks for the disconnect while it waits.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from ssdbench.serve import openai_response as answer
from ssdbench.serve.engine import Delta, Engine, Failed, Finished, Ticket
from ssdbench.serve.openai_request import ApiError, Defaults, parse_request
from ssdbench.serve.spec_metrics import ServerCounters

DISCONNECT_POLL_S = 0.5


@dataclass
class ServerState:
    """What the routes read; `engine` and `defaults` are set once the models are loaded."""

    model: str
    created: int
    counters: ServerCounters
    engine: Engine | None = None
    defaults: Defaults | None = None
    tokenize: Callable[[str], list[int]] | None = None
    template: Callable[[list[dict]], list[int]] | None = None
    vocab_size: int = 0
    version: dict | None = None  # GET /version: ssdbench's version, the method and the dtype it decodes with
    ready: bool = False

    def unavailable(self) -> ApiError | None:
        if not self.ready:
            return ApiError(503, "the model is loading", kind="service_unavailable")
        if self.engine is not None and self.engine.error is not None:
            err = self.engine.error
            return ApiError(503, f"the engine failed: {type(err).__name__}: {err}", kind="service_unavailable")
        if self.engine is not None and not self.engine.accepting:
            return ApiError(503, "the server is stopping", kind="service_unavailable")
        return None


def error_response(err: ApiError) -> JSONResponse:
    return JSONResponse(answer.error_body(err), status_code=err.status)


def build_app(state: ServerState) -> Starlette:
    async def health(request: Request) -> Response:
        refused = state.unavailable()
        return error_response(refused) if refused else JSONResponse({"status": "ok"})

    async def models(request: Request) -> Response:
        refused = state.unavailable()
        if refused:
            return error_response(refused)
        return JSONResponse(answer.models_body(state.model, state.created, state.defaults.context_positions))

    async def version(request: Request) -> Response:
        return JSONResponse(state.version)

    async def metrics(request: Request) -> Response:
        return Response(state.counters.exposition(), media_type="text/plain; version=0.0.4; charset=utf-8")

    async def completions(request: Request) -> Response:
        return await _complete(state, request, chat=False)

    async def chat(request: Request) -> Response:
        return await _complete(state, request, chat=True)

    return Starlette(routes=[
        Route("/health", health), Route("/v1/models", models), Route("/metrics", metrics), Route("/version", version),
        Route("/v1/completions", completions, methods=["POST"]),
        Route("/v1/chat/completions", chat, methods=["POST"]),
    ])


async def _complete(state: ServerState, request: Request, *, chat: bool) -> Response:
    refused = state.unavailable()
    if refused:
        return error_response(refused)
    try:
        body = json.loads(await request.body())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        return error_response(ApiError(400, f"the request body is not valid JSON: {err}"))
    try:
        parsed = parse_request(body, chat=chat, defaults=state.defaults, tokenize=state.tokenize,
                               template=state.template, vocab_size=state.vocab_size)
    except ApiError as err:
        return error_response(err)
    ticket = Ticket(parsed, asyncio.get_running_loop())
    state.engine.submit(ticket)
    if parsed.stream:
        return StreamingResponse(_stream(ticket), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache"})
    return await _whole(ticket, request)


async def _stream(ticket: Ticket) -> AsyncIterator[bytes]:
    request = ticket.request
    try:
        if request.chat:
            yield answer.sse(answer.role_chunk(request))
        while True:
            event = await ticket.events.get()
            if isinstance(event, Delta):
                yield answer.sse(answer.delta_chunk(request, event.text, event.token_ids))
            elif isinstance(event, Finished):
                for chunk in answer.final_chunks(request, event.reason, event.prompt_tokens, event.completion_tokens,
                                                 event.metrics):
                    yield answer.sse(chunk)
                yield answer.DONE
                return
            else:  # Failed: the status line has gone out; the error is the stream's last event
                yield answer.sse(answer.error_body(ApiError(500, event.message, kind="server_error")))
                yield answer.DONE
                return
    finally:  # the client left (Starlette cancelled us) or the answer is complete: either way, nothing to decode
        ticket.gone.set()


async def _whole(ticket: Ticket, request: Request) -> Response:
    text, ids = [], []
    try:
        while True:
            try:
                event = await asyncio.wait_for(ticket.events.get(), timeout=DISCONNECT_POLL_S)
            except asyncio.TimeoutError:
                if await request.is_disconnected():
                    return Response(status_code=499)
                continue
            if isinstance(event, Delta):
                text.append(event.text)
                ids.extend(event.token_ids)
            elif isinstance(event, Finished):
                return JSONResponse(answer.whole_answer(ticket.request, "".join(text), ids, event.reason,
                                                        event.prompt_tokens, event.metrics))
            elif isinstance(event, Failed):
                return error_response(ApiError(500, event.message, kind="server_error"))
    finally:
        ticket.gone.set()
