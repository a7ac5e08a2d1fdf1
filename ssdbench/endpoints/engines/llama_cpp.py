"""llama.cpp's `llama-server`.

- Asked per request: `cache_prompt: false` (no prompt cache, so every request prefills, as the methods
  do). Its OpenAI-compatible routes send no token ids (`return_tokens` fills only the native
  `/completion`'s `tokens`), so its outputs are judged on text.
- Acceptance in a response: `timings.draft_n`, `timings.draft_n_accepted` (only when a draft ran). A
  rate: the response counts no verify steps, so no acceptance length is made up here.
- `llama-server --metrics`: `llamacpp:spec_decode_num_draft_tokens_total`, `..._num_accepted_tokens_total`,
  `..._num_drafts_total` (verify steps), `..._num_accepted_tokens_per_pos_total{position="i"}` (once a draft
  ran) and `llamacpp:tokens_predicted_total`. Values are printed with 6 significant digits, so past 1e6 a
  difference is no longer exact.
- `GET /props`: `build_info` (its version) and `model_ftype`, the GGUF's file type (`F16`, `BF16`,
  `all F32`, `Q4_0`, with `(guessed) ` before it when the file did not say).
- A local build for tests and benchmarks: `llama_cpp_build.py` (`make llama-server`).
"""

from __future__ import annotations

from ssdbench.endpoints.acceptance import Acceptance, count, object_or_empty
from ssdbench.endpoints.counters import CounterNames
from ssdbench.endpoints.dtypes import text_or_none
from ssdbench.endpoints.engines.base import Engine

SOURCE = "llama.cpp timings.draft_n"
COUNTERS = CounterNames("llamacpp:spec_decode_*", "llamacpp:tokens_predicted",
                        "llamacpp:spec_decode_num_draft_tokens", "llamacpp:spec_decode_num_accepted_tokens",
                        "llamacpp:spec_decode_num_drafts", "llamacpp:spec_decode_num_accepted_tokens_per_pos",
                        exact_below=1e6)


def from_timings(event: dict) -> Acceptance | None:
    timings = object_or_empty(event.get("timings"))
    if "draft_n" not in timings:
        return None
    return Acceptance(SOURCE, draft_tokens=count(timings["draft_n"], "timings.draft_n"),
                      accepted_tokens=count(timings.get("draft_n_accepted"), "timings.draft_n_accepted"))


def dtype_of(props: object, metrics_text: str | None) -> str | None:
    return text_or_none(props.get("model_ftype")) if isinstance(props, dict) else None


def local_build() -> str:
    from ssdbench.endpoints.engines.llama_cpp_build import server_binary

    built = server_binary()
    return str(built) if built else "not built (make llama-server)"


ENGINE = Engine(
    "llama.cpp", owned_by=("llamacpp",), acceptance_source=SOURCE,
    note="an acceptance rate (draft_n_accepted / draft_n); started with --metrics, verify steps and the "
         "acceptance length come from /metrics (llamacpp:spec_decode_*) at concurrency 1. Prompt caching "
         "is turned off per request, so every request prefills, as the methods do.",
    readers=((SOURCE, from_timings),), read_last=True, request_fields={"cache_prompt": False},
    counters=COUNTERS, self_report_route="/props", version_key="build_info", dtype_of=dtype_of,
    no_steps_note="llama.cpp's responses count no verify steps; llama-server started with --metrics gives them "
                  "from /metrics at concurrency 1",
    local_build=local_build,
)
