"""A picture of a few SSD rounds: the target's waits and verifies above the draft's work."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

TARGET_COLOURS = {"wait for proposal": "#b0b0b0", "verify": "#1f77b4", "accept + commit": "#9ecae1"}
DRAFT_COLOURS = {"prefill": "#8c564b", "glue": "#ff7f0e", "tree": "#2ca02c", "backup": "#d62728", "answer": "#9467bd", "top_up": "#17becf"}


def target_segments(rounds: pd.DataFrame) -> list[tuple[str, float, float]]:
    """(phase, start ns, end ns) per round, from the step records' t_start_ns and phase times."""
    segments = []
    for _, r in rounds.iterrows():
        t = float(r["t_start_ns"])
        for phase, ms in (("wait for proposal", r["wait_ms"]), ("verify", r["verify_ms"]),
                          ("accept + commit", r["step_ms"] - r["wait_ms"] - r["verify_ms"])):
            segments.append((phase, t, t + max(float(ms), 0.0) * 1e6))
            t += max(float(ms), 0.0) * 1e6
    return segments


def first_rounds(steps: pd.DataFrame, num_rounds: int) -> pd.DataFrame:
    """The first recorded ssd request's first rounds, one row per round."""
    ssd = steps[steps["method"] == "ssd"]
    first = ssd[(ssd["repeat"] == ssd["repeat"].min()) & (ssd["request_idx"] == ssd["request_idx"].min())]
    return first.drop_duplicates("t_start_ns").sort_values("round").head(num_rounds)


def plot_timeline(steps: pd.DataFrame, events: pd.DataFrame, out: Path, *, num_rounds: int = 8) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rounds = first_rounds(steps, num_rounds)
    segments = target_segments(rounds)
    t0, t1 = segments[0][1], segments[-1][2]
    draft = events[(events["t_end_ns"] >= t0) & (events["t_start_ns"] <= t1)]
    fig, ax = plt.subplots(figsize=(12, 2.8))
    for phase, a, b in segments:
        ax.barh(1, (b - a) / 1e6, left=(a - t0) / 1e6, color=TARGET_COLOURS[phase], edgecolor="white", linewidth=0.3)
    draft = draft.assign(_under=draft["kind"] != "answer").sort_values("_under")  # answers first: a backup inside one shows on top
    for _, e in draft.iterrows():
        a, b = max(e["t_start_ns"], t0), min(e["t_end_ns"], t1)
        ax.barh(0, (b - a) / 1e6, left=(a - t0) / 1e6, color=DRAFT_COLOURS[e["kind"]], edgecolor="white", linewidth=0.3)
    for _, r in rounds.iterrows():
        ax.axvline((r["t_start_ns"] - t0) / 1e6, color="black", linewidth=0.4, alpha=0.4)
    ax.set_yticks([0, 1], ["draft", "target"])
    ax.set_xlabel("ms since the first round shown (vertical lines: round starts)")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in (*TARGET_COLOURS.values(), *DRAFT_COLOURS.values())]
    ax.legend(handles, [*TARGET_COLOURS, *DRAFT_COLOURS], ncol=8, fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.35))
    ax.set_title(f"ssd: first {len(rounds)} rounds of request {rounds['prompt_id'].iloc[0]}", fontsize=9)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out
