"""ssdbench's own server (`ssdbench serve`, docs/serve.md).

- Every chunk carries its token ids (`choices[i].token_ids`) unasked; there is no prefix cache.
- Acceptance in a response: vLLM's `metrics.speculative_decoding` shape, with the per-step counts
  (read by vLLM's reader, so its source reads as vLLM's); ssd's cache hits, misses and backups ride
  beside it under `metrics.ssd`. An ar server sends none.
- `GET /version`: `version`, and the `dtype` and `method` it decodes with.
"""

from __future__ import annotations

from ssdbench.endpoints.dtypes import text_or_none
from ssdbench.endpoints.engines import vllm
from ssdbench.endpoints.engines.base import Engine


def dtype_of(version: object, metrics_text: str | None) -> str | None:
    return text_or_none(version.get("dtype")) if isinstance(version, dict) else None


ENGINE = Engine(
    "ssdbench", owned_by=("ssdbench",), acceptance_source=vllm.SOURCE,
    note="ssdbench serve --method ar|sd|ssd: per-request acceptance in vLLM's shape on every answer (the last "
         "chunk of a stream), token ids in every chunk, no prefix cache.",
    self_report_route="/version", version_key="version", dtype_of=dtype_of,
)
