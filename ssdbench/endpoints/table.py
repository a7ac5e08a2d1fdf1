"""The endpoint variants' figures in the run's summary table, beside the methods'.

`metrics.summary.summarize` reads acceptance from `steps` rows, which a serving engine has only where it counts
each verify step (vLLM's `detailed`). The rest come from the endpoints table here: the acceptance length and
draft acceptance rate its responses or the /metrics fallback gave (so the table shows what the footer prints),
tokens per target pass (`tok/target pass`, the figure comparable across methods and engines: for ssdbench's
methods it is their accept len, mean tokens per round), and identity with ar judged on text where the server
sent no token ids (`identity_on`).
"""

from __future__ import annotations

import pandas as pd

from ssdbench.endpoints.identity import identity_on_text
from ssdbench.endpoints.summary import table_figures
from ssdbench.metrics.summary import own_rounds, variant_label


def with_endpoint_figures(summary: pd.DataFrame, endpoints: pd.DataFrame, requests: pd.DataFrame,
                          steps: pd.DataFrame) -> pd.DataFrame:
    """The summary with the endpoint variants' figures filled in and a `tokens_per_target_pass` column."""
    summary = summary.copy()
    figures = table_figures(endpoints)
    rounds_here = own_rounds(steps) if not steps.empty else steps
    counted_here = {variant_label(m, e) for m, e in zip(rounds_here.get("method", ()), rounds_here.get("engine", ()))}
    summary["tokens_per_target_pass"] = [
        _figure(figures, label, "tokens_per_target_pass") if label in figures
        else (length if label in counted_here else float("nan"))  # a method's accept len is tokens per round
        for label, length in zip(summary["label"], summary["acceptance_length"])]
    for name in ("acceptance_length", "draft_acceptance_rate"):  # rounds a server counted one by one come first
        summary[name] = [_figure(figures, label, name) if label in figures and pd.isna(value) else value
                         for label, value in zip(summary["label"], summary[name])]
    on_text = identity_on_text(endpoints, requests)
    summary["identity_on"] = ["text" if label in on_text else "token ids" for label in summary["label"]]
    summary["outputs_match"] = [on_text.get(label, match)
                                for label, match in zip(summary["label"], summary["outputs_match"])]
    return summary


def _figure(figures: dict[str, dict], label: str, name: str) -> float:
    value = figures[label][name]
    return float("nan") if value is None else float(value)
