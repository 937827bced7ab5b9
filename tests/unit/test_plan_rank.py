"""mpips plan's ranking, on made-up runs: by the mean time to the target plus
its standard error over seeds; seeds short of it rank below; no target: by
accuracy."""
from __future__ import annotations

import pytest

from mpips.experiments.plan import Run, rank, render
from mpips.experiments.ranking import failures, verdict


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


def test_failed_stopped_and_ran_out_are_told_apart():
    """'not reached' mixed runs stopped as hopeless with runs that spent their
    budget, and a stopped run's accuracy was called final; a candidate whose
    runs failed was ranked (and recommended when every one had failed)."""
    stopped = [Run("ssp", 0, "", None, 0.71, 9.0, 0, stopped_at=9.0), Run("ssp", 1, "", None, 0.88, 20.0, 0)]
    failed = [Run("gssp", 0, "", None, 0.0, 0.0, 0, failed="ConfigError: invalid groups=9")]
    table = rank(runs("asp", [3.0, 3.2]) + stopped + failed, 0.9)
    assert list(table["candidate"]) == ["asp", "ssp"]
    text = render(table, 0.9)
    assert "| 2 | ssp | not reached (1 stopped at 3x the best, 1 ran out) |" in text
    assert "| 79.5 (at stop) |" in text
    assert failures(runs("asp", [3.0]) + failed) == {"gssp": "seed 0: ConfigError: invalid groups=9"}
    assert rank(failed, 0.9).empty


def test_the_verdict_names_the_winner_its_reasons_and_whether_the_gap_exceeds_the_noise():
    sure = rank(runs("asp", [3.0, 3.1, 3.2]) + runs("bsp", [6.0, 6.2, 6.4]), 0.9)
    text = verdict(sure, 0.9, {"gssp": "seed 0: diverged"})
    assert text.startswith("winner: asp\n  90% in 3.10 s (mean of 3 seeds, 3.00-3.20 s); wait share 0.0%, "
                           "mean staleness 0.00, final accuracy 95.0%\n")
    assert "runner-up: bsp, 6.20 s, 100% slower" in text and "the gap exceeds the seeds' noise (0.26 s" in text
    assert "not ranked (a run failed): gssp: seed 0: diverged" in text
    close = rank(runs("asp", [3.0, 4.0]) + runs("bsp", [3.2, 3.9]), 0.9)
    assert "within the seeds' noise" in verdict(close, 0.9) and "no sure winner" in verdict(close, 0.9)
    assert "one seed: the seeds' noise is not known" in verdict(rank(runs("a", [1.0]) + runs("b", [2.0]), 0.9), 0.9)
    by_accuracy = rank(runs("a", [None], accuracy=0.8) + runs("b", [3.0, None], accuracy=0.85), 0.9)
    assert verdict(by_accuracy, 0.9).startswith("winner: b\n  no entry brought every seed to 90%; by accuracy: 85.0%")
