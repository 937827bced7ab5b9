"""The probe's fits (mpips/experiments/probe.py) on made-up log rows with
known answers: device time, stragglers, network, applies."""
import numpy as np
import pytest

from mpips.experiments import probe
from mpips.io.log import APPLY, ITERATION


def rows(**columns) -> np.ndarray:
    n = len(next(iter(columns.values())))
    out = np.zeros(n, ITERATION)
    for name, values in columns.items():
        out[name] = values
    return out


def test_a_linear_device_time_and_the_factors_come_back():
    factors, its = [1.0, 1.0, 2.0, 4.0], []
    for b in (8, 16, 32):
        w = np.repeat(np.arange(4), 50)
        its.append(rows(worker=w, batch=np.full(w.size, b), iteration=np.tile(np.arange(50), 4),
                        compute=np.array(factors)[w] * (0.002 + 0.001 * b)))
    model, found = probe.device_time(its, 4)
    assert (model.a, model.c, model.p) == (pytest.approx(0.002), pytest.approx(0.001), 1.0)
    assert found == pytest.approx(factors)


def test_a_curve_that_is_not_linear_gets_its_power():
    b = np.array([8.0, 16.0, 32.0])
    a, c, p = probe.fit_curve(b, 0.001 + 0.004 * b ** 0.5)
    assert p == pytest.approx(0.5, abs=0.02) and a == pytest.approx(0.001, abs=5e-4)


def test_stragglers_rate_length_and_factor():
    # 1000 iterations at 10 ms, 20 straggles of 5 iterations at 3x, 45 apart
    compute = np.full(1000, 0.010)
    for start in range(0, 1000, 50):
        compute[start:start + 5] = 0.030
    s = probe.stragglers([rows(iteration=np.arange(1000), compute=compute)])
    # the maximum-likelihood fit of the emulation's model: each fast iteration
    # (899 with a next one) and iteration 0 was a chance to start one (20
    # did); 20 of the 100 slowed iterations were followed by a fast one,
    # q (1 - rate) = 20/100: the model lets a run of 5 be two straggles back
    # to back, so the mean length is 5 (1 - rate), a little under 5
    rate = 20 / 900
    assert (s.rate, s.length, s.factor) == (pytest.approx(rate), pytest.approx(5 * (1 - rate)), pytest.approx(3.0))


def test_a_straggle_cut_by_the_run_s_end_or_a_gap_is_not_a_short_one():
    # 10 straggles of 10 in 300 iterations, the last cut by the end after 4
    # (3 of them with a next iteration); then the same with iteration 170
    # (fast) missing from the log (a rejected push): the two pairs across
    # the gap are not counted
    compute = np.full(300, 0.010)
    for start in range(26, 300, 30):
        compute[start:start + 10] = 0.040
    whole = probe.chain([rows(iteration=np.arange(300), compute=compute)])
    assert (whole.starts, whole.slowed, whole.ends) == (10, 93, 9)   # the cut one has no end
    rate, length = whole.fit()
    assert length == pytest.approx((1 - rate) * 93 / 9)              # not 9.4, the mean run
    keep = np.arange(300) != 170
    gap = probe.chain([rows(iteration=np.arange(300)[keep], compute=compute[keep])])
    assert (gap.trials, gap.starts, gap.slowed, gap.ends) == (whole.trials - 2, 10, 93, 9)


def test_the_network_from_small_and_dense_transfers():
    dense, small = 40_000, 800
    latency, bandwidth = 20e-6, 1e9
    its = [rows(pull=np.full(100, latency + dense / bandwidth), push=np.full(100, latency + dense / bandwidth),
                bytes_sent=np.full(100, dense), bytes_dense=np.full(100, dense)),
           rows(pull=np.full(100, latency + dense / bandwidth), push=np.full(100, latency + small / bandwidth),
                bytes_sent=np.full(100, small), bytes_dense=np.full(100, dense))]
    net = probe.fit_network(its)
    assert (net.latency, net.bandwidth, net.jitter) == (pytest.approx(latency), pytest.approx(bandwidth), 0.0)


def test_applies_fixed_and_per_push_beyond_the_bytes():
    ap = np.zeros(40, APPLY)
    ap["pushes"] = np.repeat([1, 4], 20)
    ap["apply"] = 2e-4 + 5e-5 * ap["pushes"]
    found = probe.fit_apply([ap], moving=1e-5)
    assert (found.fixed, found.per_push) == (pytest.approx(2e-4), pytest.approx(4e-5))


def test_a_short_run_that_straggled_more_often_than_not():
    # 31 iterations at 10 ms, 16 of them slowed 4x (a 2 s probe run at b/2 under
    # 0.05:5:4 drew this): the median is a slowed one; the usual compute and the
    # straggles are still read from the fast ones, and the device time is 10 ms
    compute = np.full(31, 0.010)
    slowed = np.r_[12:20, 23:31]
    compute[slowed] = 0.040
    it = rows(worker=np.zeros(31), iteration=np.arange(31), compute=compute, batch=np.full(31, 8))
    iteration, slow, ratio = probe.classify(it)
    assert np.flatnonzero(slow).tolist() == slowed.tolist() and ratio[slow] == pytest.approx(4.0)
    model, _ = probe.device_time([it], 1)
    assert model.seconds(8) == pytest.approx(0.010)
