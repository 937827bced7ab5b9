"""DSSP under MPI: one job (1 server + 4 workers, slowdowns 1,1,2,4) checked
for its staleness range, its controller log and its accuracy."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import train

LOW, HIGH = 1, 6


@pytest.fixture(scope="module")
def log(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("dssp") / "run"
    return train(5, run_dir, "--paradigm", "dssp", "--staleness-low", str(LOW),
                 "--staleness-high", str(HIGH), "--slowdown", "1,1,2,4",
                 "--epochs", "10", "--lr", "0.1", "--seed", "0").log


def test_every_gate_pass_within_high(log):
    gaps = log.iterations["clock_gap"]
    assert len(gaps) and gaps.max() <= HIGH


def test_credits_carry_fast_workers_beyond_low(log):
    it = log.iterations
    beyond = it[it["clock_gap"] > LOW]
    assert len(beyond), "no gate pass beyond s_L: the controller never granted credits"
    # each such pass spends a credit of a controller call by the same worker:
    # r* credits granted at clock c' cover clocks c' .. c' + r* - 1
    grants = [(c["worker"], c["clock"], c["r_star"]) for c in log.events("dssp_controller")]
    for w, clock in zip(beyond["worker"], beyond["clock"]):
        assert any(g == w and c <= clock < c + r for g, c, r in grants), (w, clock)


def test_controller_calls_are_logged(log):
    calls = log.events("dssp_controller")
    assert calls
    r = np.array([c["r_star"] for c in calls])
    assert ((r >= 0) & (r <= HIGH - LOW)).all() and (r > 0).any()
    for c in calls:
        assert c["fastest"] == c["worker"] and c["slowest"] != c["worker"]
        assert c["gap"] > LOW
        assert {"interval_fast", "interval_slow", "call_time", "time"} <= set(c)

