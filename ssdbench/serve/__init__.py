"""`ssdbench serve`: ar, sd or ssd behind an OpenAI-compatible HTTP server (docs/serve.md).

wire: the request bodies (openai_request), the answers (openai_response) and the speculation
figures per request and in /metrics (spec_metrics); engine: the decoding thread that batches the
queued requests and streams their tokens; app: the Starlette routes; server: models, records and
uvicorn's lifetime.
"""
