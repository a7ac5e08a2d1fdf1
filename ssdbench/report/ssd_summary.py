"""SSD's own figures for a run: cache hits, acceptance on hit vs miss, waiting, overlap."""

from __future__ import annotations

import pandas as pd

from ssdbench.metrics.summary import add_label, cache_hits


def round_level(steps: pd.DataFrame) -> pd.DataFrame:
    """One row per round (rows of a batch share a round's timings; t_start_ns identifies it)."""
    return steps.drop_duplicates(subset=["label", "repeat", "t_start_ns"])


def ssd_overview(steps: pd.DataFrame) -> pd.DataFrame:
    """Per ssd variant: hit rate, AL on hit/miss, wait share of the round, draft work hidden by verify."""
    steps = add_label(steps)
    steps = steps[steps["method"] == "ssd"]
    rows = []
    for label, group in steps.groupby("label", sort=False):
        rounds = round_level(group)
        wait, draft, step = rounds["wait_ms"].sum(), rounds["draft_ms"].sum(), rounds["step_ms"].sum()
        row = {"label": label, **cache_hits(group)}
        row["wait_share"] = float(wait / step) if step else float("nan")
        # the draft's busy time that the verifier did not wait for ran alongside verification
        row["overlap_share"] = float(max(draft - wait, 0.0) / draft) if draft else float("nan")
        row["fan_out_mean"] = float(group["fan_out_total"].mean())
        row["backups"] = ", ".join(f"{k} {v}" for k, v in group["backup"].value_counts().items()) or "none"
        rows.append(row)
    return pd.DataFrame(rows)


def chain_against_verify(steps: pd.DataFrame, events: pd.DataFrame, k: int) -> dict | None:
    """Whether ssd's draft can build a K-deep speculation inside one verify on this machine.

    The chain is the shortest the draft ever builds: its median glue plus K tree steps at the median of
    the narrowest width's step (one branch); the verify is the median of ssd's verify times. Where the
    chain is longer, every hit has the verifier wait or a shallower tree, so ssd's figures measure
    these two kernels' relative speeds here rather than the method (docs/DESIGN.md §5.6). None where
    the run has no ssd rounds or no draft timeline to judge by.
    """
    if events is None or events.empty or steps.empty:
        return None
    ssd_steps, ssd_events = add_label(steps[steps["method"] == "ssd"]), events[events["method"] == "ssd"]
    durations = (ssd_events["t_end_ns"] - ssd_events["t_start_ns"]) / 1e6
    glue, tree = durations[ssd_events["kind"] == "glue"], durations[ssd_events["kind"] == "tree"]
    if ssd_steps.empty or glue.empty or tree.empty:
        return None
    tree_step = float(tree.quantile(0.1))  # a narrow tree's step: wider ones cost more, the chain needs one branch
    chain = float(glue.median()) + k * tree_step
    rounds = round_level(ssd_steps)
    return {"chain_ms": chain, "glue_ms": float(glue.median()), "tree_step_ms": tree_step, "k": k,
            "verify_ms": float(rounds["verify_ms"].median()), "fits": chain <= rounds["verify_ms"].median(),
            **_verify_slowdown(rounds)}


MIN_ROUNDS = 5  # rounds of each kind before their verify medians are compared


def _verify_slowdown(rounds: pd.DataFrame) -> dict:
    """Median verify with the draft building a tree beside it over the median without (sync rounds): on a
    CPU the two cores share one memory bus, and the auto policy spends speculation only where it pays
    for this (speculation/mode.py)."""
    built = rounds["fan_out_total"] > 0
    if built.sum() < MIN_ROUNDS or (~built).sum() < MIN_ROUNDS:
        return {}
    with_tree, alone = rounds.loc[built, "verify_ms"].median(), rounds.loc[~built, "verify_ms"].median()
    return {"verify_with_tree_ms": float(with_tree), "verify_alone_ms": float(alone),
            "verify_slowdown": float(with_tree / alone)}


def chain_lines(check: dict | None) -> list[str]:
    """The run's output on the draft's chain against a verify: one line when the chain cannot finish within
    it (the figures are then an artefact of relative kernel speeds), one on the verify's slowdown."""
    if check is None:
        return []
    lines = []
    if not check["fits"]:
        lines.append(f"ssd: the draft's chain (glue {check['glue_ms']:.1f} ms + {check['k']} tree steps × "
                     f"{check['tree_step_ms']:.1f} ms = {check['chain_ms']:.1f} ms) does not finish within a verify "
                     f"({check['verify_ms']:.1f} ms median): hits wait for the draft or find a shallower tree, so "
                     "ssd's figures here reflect the two models' relative kernel speeds on this machine, not the method.")
    if "verify_slowdown" in check:
        lines.append(f"ssd: verifies took {check['verify_slowdown']:.2f}x as long while the draft built a tree beside "
                     f"them ({check['verify_with_tree_ms']:.1f} ms median) as in rounds without one "
                     f"({check['verify_alone_ms']:.1f} ms): the cost speculation pays on this machine's shared memory bus.")
    return lines
