"""`datasets`: SSD ~4.7x AR on average on Llama-3.1-70B / 3.2-1B (HumanEval 5.2x, GSM8K 5.5x, Alpaca 4.1x,
UltraFeedback 3.9x), up to 2x over optimised SD.

ar, sd and ssd on each of the paper's datasets that this machine has (humaneval is shipped; the others
are read from --data-dir), one sweep each: DIR/datasets-<suite>/. Another pair on other hardware is not
expected to reach the paper's factors, so the verdicts are on their direction: ssd faster than ar, and
faster than sd; the paper's figure stands beside each.
"""

from __future__ import annotations

from ssdbench.metrics.stats import geometric_mean_ci
from ssdbench.reproduce.findings import FAILS, HOLDS, Finding, judge_above, unmeasurable
from ssdbench.reproduce.resample import paired_ratio
from ssdbench.reproduce.study import Study, StudyData, StudySweep

NAME = "datasets"
PAPER = {"humaneval": "5.2x", "gsm8k": "5.5x", "alpaca": "4.1x", "ultrafeedback": "3.9x"}


def unavailable(suite: str, data_dir) -> str | None:
    """Why the suite cannot be read here, or None."""
    from ssdbench.errors import SsdbenchError
    from ssdbench.suites.registry import load_suite

    try:
        load_suite(suite, data_dir=data_dir)
    except SsdbenchError as err:
        return f"suite not available here: {err}"
    return None


def sweeps(base, quick: bool) -> list[StudySweep]:
    suites = ("humaneval",) if quick else tuple(PAPER)
    return [StudySweep(f"{NAME}-{suite}", {"suite": suite, "methods": ("ar", "sd", "ssd"), "timeline": False},
                       {"temperature": [base.temperature]}, skipped=unavailable(suite, base.data_dir))
            for suite in suites]


def judge(data: StudyData) -> list[Finding]:
    findings = [unmeasurable(NAME, f"ssd faster than ar on {folder.split('-', 1)[1]}", "ssd's tok/s over ar's",
                             reason) for folder, reason in data.skipped.items()]
    if data.requests.empty:
        return findings or [unmeasurable(NAME, "ssd faster than ar", "-", "no complete point recorded")]
    for suite, rows in data.requests.groupby("suite"):
        for base_method, paper in (("ar", PAPER.get(suite, "")), ("sd", "up to 2x over optimised SD")):
            interval = geometric_mean_ci(paired_ratio(rows, "method", "ssd", base_method).to_numpy())
            verdict, reason = judge_above(interval.low, interval.high, 1.0, above=f"ssd faster than {base_method}",
                                          below=f"ssd slower than {base_method}")
            findings.append(Finding(NAME, f"ssd faster than {base_method} on {suite}",
                                    f"ssd's decode tok/s over {base_method}'s", interval.estimate, interval.low,
                                    interval.high, verdict, reason, paper=paper,
                                    settings={"suite": suite, "prompts": interval.n}))
    findings.append(judge_order(data.requests))
    return findings


def judge_order(requests) -> Finding:
    """The datasets ranked by ssd's speedup over ar, beside the paper's ranking (Spearman's rho)."""
    import numpy as np

    claim = "the datasets rank by SSD's speedup as in the paper (GSM8K > HumanEval > Alpaca > UltraFeedback)"
    measured = {suite: geometric_mean_ci(paired_ratio(rows, "method", "ssd", "ar").to_numpy()).estimate
                for suite, rows in requests.groupby("suite") if suite in PAPER}
    if len(measured) < 3:
        return unmeasurable(NAME, claim, "Spearman's rho, measured vs the paper's order",
                            f"only {len(measured)} of the paper's {len(PAPER)} datasets measured here (the others "
                            "need --data-dir); a ranking needs three", settings={"measured": measured})
    suites = sorted(measured)
    paper_rank = np.argsort(np.argsort([-float(PAPER[s].rstrip("x")) for s in suites]))
    our_rank = np.argsort(np.argsort([-measured[s] for s in suites]))
    rho = float(np.corrcoef(paper_rank, our_rank)[0, 1])
    verdict, reason = (HOLDS, "the same order") if rho == 1.0 else (FAILS, "another order")
    return Finding(NAME, claim, "Spearman's rho, measured vs the paper's order", rho, float("nan"), float("nan"),
                   verdict, f"{reason} (no interval: one speedup per dataset)", settings={"measured": measured})


STUDY = Study(NAME, "SSD ~4.7x AR on average, up to 2x over SD", "HumanEval 5.2x, GSM8K 5.5x, Alpaca 4.1x, "
              "UltraFeedback 3.9x", sweeps, judge, why="the run's temperature, on every paper dataset present")
