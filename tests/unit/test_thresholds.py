"""tests/thresholds.py agrees with its measurement (benchmarks/results/test_margins.json):
the same set-ups, the minimum it records, and every threshold at least 5 points below it."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.thresholds import SETUPS

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "test_margins.json"


@pytest.mark.parametrize("name", sorted(SETUPS))
def test_each_threshold_has_its_measured_margin(name):
    setup = SETUPS[name]
    measured = json.loads(RESULTS.read_text())["setups"][name]
    assert measured["flags"] == list(setup.flags), f"{name}: set-up changed since measured: run benchmarks/test_margins.py"
    assert round(measured["min"], 3) == setup.measured
    assert len(measured["accuracy"]) == 3 and all(len(runs) >= 5 for runs in measured["accuracy"].values())
    if setup.spread:
        assert measured["max"] - measured["min"] <= setup.spread
    else:
        assert setup.measured - setup.threshold >= 0.05 - 1e-9, f"{name}: less than 5 points of margin"
