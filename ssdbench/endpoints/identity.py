"""Greedy identity of an endpoint's outputs with ar's, on what the server really sent.

Where the server sent token ids (vLLM with `return_token_ids`), its ids are compared with ar's, as a method's
are. Where it sent text only (llama-server's OpenAI routes), re-tokenising the text need not give the server's
ids (`(' + ,` may come back as `(',`: other ids, the same text), so ids would call identical outputs different:
the text is compared instead with ar's output decoded by the target's tokenizer (`endpoints.text_matches_ar`),
and the summary says the verdict was judged on text.
"""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from ssdbench.metrics.summary import PAIR_KEYS, variant_label

Decode = Callable[[list[int]], str]
TOKENIZER = "tokenizer"  # endpoints.token_source of ids re-tokenised from the text


def ar_outputs(requests: dict[str, list]) -> dict[tuple, list[int]]:
    """ar's output ids by (suite, prompt id, repeat), from the recorder's requests columns."""
    rows = zip(requests.get("method", ()), requests.get("engine", ()), *(requests.get(k, ()) for k in PAIR_KEYS),
               requests.get("output_token_ids", ()))
    return {(suite, prompt, repeat): list(ids) for method, engine, suite, prompt, repeat, ids in rows
            if variant_label(method, engine) == "ar"}


def mark_text_identity(endpoints: dict[str, list], requests: dict[str, list], decode: Decode) -> None:
    """Fill `text_matches_ar` in the recorder's endpoints columns: for each request judged on text (token_source
    tokenizer) on a prompt and repeat that ar ran, whether its text equals ar's decoded output."""
    if not endpoints or "text_matches_ar" not in endpoints:
        return
    reference = ar_outputs(requests)
    if not reference:
        return
    keys = zip(*(endpoints[k] for k in PAIR_KEYS))
    for n, (key, source, text) in enumerate(zip(keys, endpoints["token_source"], endpoints["text"])):
        if source == TOKENIZER and text is not None and key in reference:
            endpoints["text_matches_ar"][n] = text == decode(reference[key])


def without_text_judged(requests: dict[str, list], endpoints: dict[str, list]) -> dict[str, list]:
    """The recorder's requests columns less the endpoint requests judged on text: their ids are the tokenizer's
    reading of the text, not the server's choices, so no logit margin can be read at their first difference."""
    if not endpoints or not requests:
        return requests
    keys = ("method", "engine", "request_idx", "repeat")
    on_text = {key for key, source in zip(zip(*(endpoints[k] for k in keys)), endpoints["token_source"])
               if source == TOKENIZER}
    if not on_text:
        return requests
    kept = [n for n, key in enumerate(zip(*(requests[k] for k in keys))) if key not in on_text]
    return {name: [values[n] for n in kept] for name, values in requests.items()}


def identity_on_text(endpoints: pd.DataFrame, requests: pd.DataFrame) -> dict[str, float]:
    """Per endpoint variant with a request judged on text: the share of its requests identical to ar (the text
    where it was judged on text, the ids where the server sent them). Variants judged on ids alone are left out
    (the summary's own `outputs_match` is theirs)."""
    if endpoints.empty or "text_matches_ar" not in endpoints or requests.empty:
        return {}
    ok = endpoints[(endpoints["status"] == "ok")]
    on_text = ok[(ok["token_source"] == TOKENIZER) & ok["text_matches_ar"].notna()]
    reference = ar_outputs({k: list(requests[k]) for k in requests.columns})
    shares = {}
    for (method, engine), group in ok.groupby(["method", "engine"], sort=False):
        if not group.index.isin(on_text.index).any():
            continue
        same = [_identical(row, reference, requests) for _, row in group.iterrows()]
        same = [s for s in same if s is not None]
        if same:
            shares[variant_label(method, engine)] = sum(same) / len(same)
    return shares


def _identical(row: pd.Series, reference: dict[tuple, list[int]], requests: pd.DataFrame) -> bool | None:
    """Whether one endpoint request equals ar's: on text or on ids, as it was recorded; None without ar's."""
    key = tuple(row[k] for k in PAIR_KEYS)
    if key not in reference:
        return None
    if row["token_source"] == TOKENIZER:
        return None if pd.isna(row["text_matches_ar"]) else bool(row["text_matches_ar"])
    mine = requests[(requests["method"] == row["method"]) & (requests["engine"] == row["engine"])
                    & (requests["request_idx"] == row["request_idx"]) & (requests["repeat"] == row["repeat"])]
    return None if mine.empty else list(mine["output_token_ids"].iloc[0]) == reference[key]
