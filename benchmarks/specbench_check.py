"""Recompute speedup and acceptance from `ssdbench export --format specbench` files the way
Spec-Bench's evaluation/speed.py does, reading only the JSONL (no ssdbench code), so the
exported answers can be checked against the figures `ssdbench run` printed.

    python benchmarks/specbench_check.py ANSWERS_DIR [--baseline ar]

Spec-Bench's formulas: per question, tokens/s = sum(new_tokens) / sum(wall_time); a variant's
speedup = mean of its per-question tokens/s over the baseline's mean; the mean accepted tokens
= mean over every entry of accept_lengths (one entry per target forward, prefill included).
One difference, stated: Spec-Bench's script counts the baseline's tokens by re-tokenising its
answer text; this check uses the baseline's recorded new_tokens, which ssdbench also uses.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path


def read_answers(path: Path) -> list[dict]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def per_question_speed(answers: list[dict]) -> list[float]:
    return [sum(a["choices"][0]["new_tokens"]) / sum(a["choices"][0]["wall_time"]) for a in answers]


def mean_accepted(answers: list[dict]) -> float:
    lengths = [n for a in answers for n in a["choices"][0]["accept_lengths"]]
    return statistics.fmean(lengths) if lengths else float("nan")


def lengths_sum_to_tokens(answers: list[dict]) -> bool:
    return all(sum(a["choices"][0]["accept_lengths"]) == sum(a["choices"][0]["new_tokens"]) for a in answers)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("answers", type=Path)
    parser.add_argument("--baseline", default="ar", help="stem of the baseline's answer file")
    args = parser.parse_args()
    files = {p.stem: read_answers(p) for p in sorted(args.answers.glob("*.jsonl"))}
    if args.baseline not in files:
        raise SystemExit(f"no {args.baseline}.jsonl in {args.answers}: found {', '.join(files) or 'nothing'}")
    base = statistics.fmean(per_question_speed(files[args.baseline]))
    print(f"{'variant':<28} {'tok/s mean':>10} {'speedup':>8} {'mean accepted':>14} {'sums ok':>8}")
    for name, answers in files.items():
        speed = statistics.fmean(per_question_speed(answers))
        print(f"{name:<28} {speed:>10.2f} {speed / base:>7.3f}x {mean_accepted(answers):>14.3f} "
              f"{str(lengths_sum_to_tokens(answers)):>8}")


if __name__ == "__main__":
    main()
