"""Serving engines as variants: OpenAI-compatible endpoints run on the same prompts as the methods.

One concept per file: `spec` (what the user asked for), `http` (one connection, errors as one line),
`sse` (server-sent events), `acceptance` (each engine's per-request speculation fields), `request`
(one streamed completion, timed), `preflight` (is the server there, serving which model), `launch`
(a server started and stopped by the run), `runner` (every request of every endpoint, recorded),
`kinds` (what `ssdbench ls` lists) and `build_llama_server` (a real server for tests).
"""
