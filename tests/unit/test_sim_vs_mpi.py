"""benchmarks/sim_vs_mpi.py's accuracy verdict: the 1.5-point bound, else the seeds' noise."""
from __future__ import annotations

import math
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks"))
from sim_vs_mpi import accuracy_verdict  # noqa: E402


def test_within_the_bound_passes():
    assert accuracy_verdict([0.93, 0.94, 0.95], [0.935, 0.935, 0.94])[2] == "pass"


def test_beyond_the_bound_is_judged_against_the_seeds_noise():
    # GSSP on MNIST-1D (results/sim_vs_mpi-mnist1d.md): -3.6 points, noise 10.8
    diff, noise, verdict = accuracy_verdict([0.778, 0.927, 0.936], [0.935, 0.883, 0.931])
    assert (diff, noise, verdict) == (pytest.approx(-3.6, abs=0.01), pytest.approx(10.78, abs=0.01), "within noise")
    # the same gap between steady runs is a failure
    assert accuracy_verdict([0.90, 0.90, 0.901], [0.94, 0.94, 0.941])[2] == "FAIL"


def test_one_seed_has_no_noise_to_hide_in():
    diff, noise, verdict = accuracy_verdict([0.90], [0.95])
    assert math.isnan(noise) and verdict == "FAIL"
