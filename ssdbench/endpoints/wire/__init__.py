"""The wire to an OpenAI-compatible server, knowing no engine: HTTP, server-sent events, a JSON answer's
fields checked where they are read, one streamed completion, and Prometheus' text format."""
