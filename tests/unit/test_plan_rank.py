"""mpips plan's ranking, on made-up runs: by the mean time to the target plus
its standard error over seeds; seeds short of it rank below; no target: by
accuracy."""
from __future__ import annotations

import pytest

from mpips.experiments.plan import Run, rank, render


def runs(name, times, accuracy=0.95):
    return [Run(name, seed, "", t, accuracy, 10.0, 0) for seed, t in enumerate(times)]


def test_of_two_candidates_predicted_as_fast_the_one_whose_seeds_agree_ranks_first():
    # means 3.75 and 3.77; standard errors 0.40 and 0.04
    table = rank(runs("asp", [2.95, 4.55, 3.35, 4.15]) + runs("localsgd", [3.73, 3.81, 3.69, 3.85]), 0.9)
    assert list(table["candidate"]) == ["localsgd", "asp"]
    assert table["time_to_target"].tolist() == pytest.approx([3.77, 3.75])
    assert table["time_upper"].tolist() == pytest.approx([3.77 + 0.0365, 3.75 + 0.365], abs=1e-3)
    text = render(table, 0.9, 0.0, 3)
    assert "time to 90% (mean of 3 evaluations) s" in text and "(ranked by)" in text
    assert "| 1 | localsgd | 3.77 | 3.69-3.85 | 3.81 | 4/4 |" in text


def test_a_candidate_short_of_the_target_in_a_seed_ranks_below_every_one_that_reached_it():
    table = rank(runs("bsp", [9.0, 9.5]) + runs("asp", [2.0, None], accuracy=0.97), 0.9)
    assert list(table["candidate"]) == ["bsp", "asp"] and table["reached"].tolist() == ["2/2", "1/2"]


def test_one_seed_ranks_by_its_time_and_no_target_by_the_accuracy():
    table = rank(runs("a", [3.0]) + runs("b", [2.5]), 0.9)
    assert list(table["candidate"]) == ["b", "a"] and table["time_upper"].tolist() == [2.5, 3.0]
    table = rank(runs("a", [None], accuracy=0.9) + runs("b", [None], accuracy=0.8), None)
    assert list(table["candidate"]) == ["a", "b"]
