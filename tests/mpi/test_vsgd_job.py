"""VSGD under real MPI: the path-length bound bounds the exact value staleness,
stale pushes of a straggler are damped, fresh ones are not, and it trains."""
import numpy as np
import pytest
from conftest import train

# per-worker budget: the straggler pushes as often as the others (clock-based checks)
COMMON = ("--paradigm", "vsgd", "--epochs", "10", "--eval-every", "5", "--budget", "per-worker")


@pytest.fixture(scope="module")
def straggler(tmp_path_factory):
    """ASP gating, exact measure (so both are logged), one worker 6x slower;
    the default lr 0.05: at 0.1, ASP with this straggler on two loaded cores
    diverged at times, with and without VSGD (final accuracy 11%)."""
    return train(5, tmp_path_factory.mktemp("vsgd_asp"), *COMMON, "--gate", "asp",
                 "--value-measure", "exact", "--slowdown", "1,1,1,6").log


@pytest.fixture(scope="module")
def default(tmp_path_factory):
    """VSGD's defaults: SSP(3) gating, the path-length bound, rule max."""
    return train(5, tmp_path_factory.mktemp("vsgd_ssp"), *COMMON, "--lr", "0.1",
                 "--slowdown", "1,1,2,4").log


def test_bound_is_an_upper_bound_of_the_exact_value(straggler):
    it = straggler.iterations
    assert len(it) == 4 * straggler.layout["iterations_per_worker"]
    exact, bound = it["value_staleness"], it["value_staleness_bound"]
    assert np.isfinite(exact).all() and np.isfinite(bound).all(), "both measures logged at every push"
    low = bound < exact * (1 - 1e-4) - 1e-6
    assert not low.any(), f"bound below exact at {low.sum()} pushes: {it[low][:5]}"
    assert (exact > 1).sum() >= 10, "too few stale pushes to compare the measures"


def test_lr_scale_is_the_rule_of_the_exact_value(straggler):
    it = straggler.iterations
    expected = 1 / np.maximum(1.0, it["value_staleness"].astype(np.float64))
    np.testing.assert_allclose(it["lr_scale"], expected, rtol=1e-5)
    np.testing.assert_allclose(it["scale"], it["lr_scale"] / 4, rtol=1e-5)  # base 1/W stays


def test_straggler_is_damped_and_fresh_pushes_are_not(straggler):
    """On the real transport: fresh pushes undamped, the straggler's stale
    ones damped more than the fast workers'. How often, at defaults and in
    exact numbers, is the simulator's test (tests/sim): here the share moved
    with the machine's load (it had been loosened from 0.8 to 0.65)."""
    it = straggler.iterations
    fresh = it[it["staleness"] == 0]
    assert len(fresh) > 0 and (fresh["lr_scale"] == 1.0).all()
    slow = it[(it["worker"] == 3) & (it["staleness"] >= 3)]
    assert len(slow) >= 5, "the straggler hardly ever overlapped the fast workers"
    fast = it[it["worker"] != 3]
    assert np.median(slow["lr_scale"]) < np.median(fast["lr_scale"])


def test_default_vsgd_finishes(default):
    # Its accuracy moves with the machine's load (0.958-0.972 in 5 runs; ASP with a 6x
    # straggler, above, ended at 0.82 once in 7): reaching 90% is checked in tests/sim.
    s = default.summary()
    assert s["status"] == "finished" and s["complete"], s


def test_default_is_ssp_gated_with_the_bound(default):
    it = default.iterations
    assert it["clock_gap"].max() <= 3                      # SSP(3) gating underneath
    assert np.isnan(it["value_staleness"]).all()           # exact not measured by default
    bound = it["value_staleness_bound"].astype(np.float64)
    assert np.isfinite(bound).all() and (bound > 1).any()
    np.testing.assert_allclose(it["lr_scale"], 1 / np.maximum(1.0, bound), rtol=1e-5)
