"""A run's requests as Spec-Bench model-answer records, one list per variant.

Spec-Bench (hemingkx/Spec-Bench) keeps one JSON line per question: `question_id`, `category`,
and `choices`, each with per-turn lists `turns` (text), `new_tokens`, `wall_time` (seconds,
the whole request) and `accept_lengths` (tokens committed by each target forward, the
prefill's first token included, so they sum to new_tokens). ssdbench decodes one turn per
request; its repeats become the choices. DataFrames in, plain dicts out; writing is the CLI's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import pandas as pd

from ssdbench.metrics.summary import PAIR_KEYS, add_label
from ssdbench.sampling.acceptance_setting import EXACT

REQUEST_KEY = ["label"] + PAIR_KEYS  # one request of one variant


def accept_lengths(request: pd.Series, steps: pd.DataFrame) -> list[int]:
    """One entry per target forward: 1 for the prefill, then each round's emitted tokens.

    Engines that report no rounds (transformers' baselines) give [] unless they are `ar`,
    where every forward commits one token.
    """
    if steps.empty:
        return [1] * int(request["new_tokens"]) if request["method"] == "ar" else []
    return [1] + [int(n) for n in steps.sort_values("round")["emitted"]]


def question_of(prompt_id: str) -> int | str:
    """`specbench/81` → 81 (Spec-Bench's ids are integers); other ids stay text."""
    local = prompt_id.split("/", 1)[-1]
    return int(local) if local.isdigit() else local


def variant_acceptance(steps: pd.DataFrame) -> dict[str, str]:
    """Per variant label, the acceptance its rounds used where it is not the exact rule (`synthetic:...`)."""
    if steps.empty:
        return {}
    labelled = add_label(steps)
    made_up = labelled[labelled["acceptance"] != EXACT]
    return dict(zip(made_up["label"], made_up["acceptance"]))


def answer_records(requests: pd.DataFrame, steps: pd.DataFrame, *, categories: Mapping[str, str],
                   decode_text: Callable[[list[int]], str], model_id: str) -> dict[str, list[dict]]:
    """Per variant label, one Spec-Bench answer record per prompt, in the run's request order.

    A variant timed with synthetic acceptance says so in its model_id and in each record's `acceptance`:
    its text is not the target's, and Spec-Bench would otherwise read it as a real method's answers."""
    made_up = variant_acceptance(steps)
    requests, steps = add_label(requests), add_label(steps)
    by_request = dict(tuple(steps.groupby(REQUEST_KEY))) if len(steps) else {}
    out: dict[str, list[dict]] = {}
    for label, group in requests.groupby("label", sort=False):
        records = []
        mark = {"acceptance": made_up[label]} if label in made_up else {}
        for prompt_id, repeats in group.groupby("prompt_id", sort=False):
            choices = [_choice(r, by_request.get(tuple(r[REQUEST_KEY]), steps.iloc[:0]), decode_text)
                       for _, r in repeats.sort_values("repeat").iterrows()]
            records.append({"question_id": question_of(prompt_id), "category": categories[prompt_id],
                            "answer_id": f"{requests['run_id'].iloc[0]}/{label}/{prompt_id}",
                            "model_id": f"{model_id}-{label}" + (f"-{made_up[label]}" if mark else ""),
                            **mark, "choices": choices})
        out[label] = records
    return out


def _choice(request: pd.Series, steps: pd.DataFrame, decode_text: Callable[[list[int]], str]) -> dict:
    wall_s = (float(request["ttft_ms"]) + (0.0 if pd.isna(request["decode_ms"]) else float(request["decode_ms"]))) / 1e3
    return {"index": int(request["repeat"]), "turns": [decode_text(list(request["output_token_ids"]))],
            "new_tokens": [int(request["new_tokens"])], "wall_time": [wall_s],
            "accept_lengths": accept_lengths(request, steps)}
