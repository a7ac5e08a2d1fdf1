"""`--fan-out auto`'s sizing (speculation/costs.py) and allocation (forking.py): the tree starts at one
branch, grows only as far as the measured costs fit inside one verify, and its branches go to the
likeliest outcomes under the acceptance measured in the run."""

import torch

from ssdbench.speculation.costs import CostModel
from ssdbench.speculation.fan_out import build_fan_out
from ssdbench.speculation.forking import fork_branches
from ssdbench.sampling.params import RowSampling
from ssdbench.speculation.speculator import DraftRow


def measured(round_ms: float, glue_ms: float, steps: list[tuple[int, float]]) -> CostModel:
    costs = CostModel()
    costs.note_round(round_ms)
    costs.note_glue(glue_ms)
    for width, ms in steps:
        costs.note_tree_step(width, ms)
    return costs


def test_one_branch_until_the_costs_are_measured():
    assert CostModel().branches_that_fit(4, 15) == 1


def test_the_width_is_what_fits_inside_one_verify():
    # a step costs 8 ms + 2 ms per branch; a verify 100 ms, glue 10: (0.9 * 100 - 10) / 4 = 20 ms per step
    costs = measured(100.0, 10.0, [(1, 10.0), (3, 14.0), (5, 18.0)])
    assert [costs.branches_that_fit(4, 15) for _ in range(7)] == [2, 3, 4, 5, 6, 6, 6]  # one more a round
    assert measured(40.0, 10.0, [(1, 10.0), (3, 14.0)]).branches_that_fit(4, 15) == 1  # nothing fits: one
    assert costs.branches_that_fit(4, 3) == 3  # never past the budget


def sharp_logits(vocab: int, top: list[int]) -> torch.Tensor:
    logits = torch.full((vocab,), -10.0)  # [V]
    for rank, token in enumerate(top):
        logits[token] = 5.0 - rank
    return logits


def test_auto_gives_the_branches_to_the_likeliest_outcomes():
    """At high acceptance nearly all the mass is on 'every draft accepted': the branches go to that
    outcome's likeliest bonuses, as many as the cap (a fixed 3 per outcome held the rest back); at low
    acceptance the first goes to 'none accepted'."""
    auto = build_fan_out("auto", k=4, fan_out_list=None, miss_list=None)
    row = DraftRow(history=[1, 2, 3], returned=[5, 6, 7, 8])
    glue = torch.stack([sharp_logits(32, [10 + k, 20 + k]) for k in range(4)]
                       + [torch.tensor([5.0 - 0.1 * (i % 5) if i < 5 else -10.0 for i in range(32)])])  # [K+1, V]
    greedy = RowSampling(temperature=torch.zeros(1), top_p=torch.ones(1), top_k=(0,))
    high = fork_branches([row], [glue], auto, greedy, 0.97, cap=4)[0]
    assert [(b.accepted, b.bonus) for b in high] == [(4, 0), (4, 1), (4, 2), (4, 3)]
    low = fork_branches([row], [glue], auto, greedy, 0.2, cap=1)[0]
    assert [(b.accepted, b.bonus) for b in low] == [(0, 10)]


def test_one_slow_round_does_not_size_the_tree():
    costs = measured(100.0, 10.0, [(1, 10.0), (3, 14.0)])
    for ms in (100.0, 100.0, 900.0, 100.0):  # a warm-up's first verify, say
        costs.note_round(ms)
    assert costs.round_ms == 100.0
