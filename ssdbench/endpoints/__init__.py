"""Serving engines as variants: OpenAI-compatible endpoints run on the same prompts as the methods.

Three rooms. `wire/` is the engine-agnostic transport: `http` (one connection, errors as one line),
`sse` (server-sent events), `fields` (a JSON answer's fields, type-checked), `request` (one streamed
completion, timed) and `prometheus` (the /metrics text format). `engines/` holds what each engine is:
one file per engine declaring an `Engine` (its `owned_by`, request fields, response shapes, counters,
self-report) and `registry` listing them, plus `llama_cpp_build` (a real llama-server for tests). The
files here use both: `spec` (what the user asked for), `preflight` (is the server there, serving which
model, which engine), `launch` (a server started and stopped by the run), `runner` (every request of
every endpoint, recorded), `acceptance`, `counters`, `counter_acceptance` and `consistency` (the
speculation figures, read and checked), and the records, summary and table that report them.
"""
