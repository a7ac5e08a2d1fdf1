"""SGLang.

- Asked per request: `return_spec_tokens_details` and `return_token_ids`; that it answers the latter
  with vLLM's `choices[i].token_ids` is assumed, untested here (where it does not, the text is judged).
  No per-request switch for its radix cache is known here: the warm-up's unmeasured prompt and the
  cached prompt tokens its usage reports (warned of where not 0) are what guard its measured requests.
- Acceptance in a response: `sglext.spec_tokens_details` (OpenAI endpoints) with `spec_verify_ct`,
  `spec_num_proposed_drafts`, `spec_num_correct_drafts`, `spec_accept_length`; on `/generate`, the same
  names in `meta_info`.
- `GET /get_server_info`: `version`, and `dtype` (its server argument; `auto` says nothing and reads as
  unknown), assumed from its documentation and untested here.
"""

from __future__ import annotations

from ssdbench.endpoints.acceptance import Acceptance, count, number, object_or_empty
from ssdbench.endpoints.dtypes import text_or_none
from ssdbench.endpoints.engines.base import Engine

SOURCE_EXT = "sglang sglext.spec_tokens_details"
SOURCE_META = "sglang meta_info"


def _details(details: dict, source: str, where: str) -> Acceptance | None:
    if "spec_verify_ct" not in details:
        return None
    steps = count(details["spec_verify_ct"], where + "spec_verify_ct")
    length = number(details.get("spec_accept_length"), where + "spec_accept_length")
    return Acceptance(source, draft_tokens=count(details.get("spec_num_proposed_drafts"),
                                                 where + "spec_num_proposed_drafts"),
                      accepted_tokens=count(details.get("spec_num_correct_drafts"), where + "spec_num_correct_drafts"),
                      verify_steps=steps, acceptance_length=length if steps else None)


def from_sglext(event: dict) -> Acceptance | None:
    return _details(object_or_empty(object_or_empty(event.get("sglext")).get("spec_tokens_details")), SOURCE_EXT,
                    "sglext.spec_tokens_details.")


def from_meta_info(event: dict) -> Acceptance | None:
    return _details(object_or_empty(event.get("meta_info")), SOURCE_META, "meta_info.")


def dtype_of(info: object, metrics_text: str | None) -> str | None:
    found = text_or_none(info.get("dtype")) if isinstance(info, dict) else None
    return None if found is None or found.lower() == "auto" else found


ENGINE = Engine(
    "sglang", owned_by=("sglang",), acceptance_source=SOURCE_EXT,
    note="asked per request with return_spec_tokens_details (and return_token_ids)",
    readers=((SOURCE_EXT, from_sglext), (SOURCE_META, from_meta_info)),
    request_fields={"return_spec_tokens_details": True, "return_token_ids": True},
    self_report_route="/get_server_info", version_key="version", dtype_of=dtype_of,
    no_steps_note="SGLang counted 0 verify steps",
)
