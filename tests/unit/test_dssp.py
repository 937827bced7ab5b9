"""DSSP without MPI: the controller on hand-computed cases, and the gate's rule."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from mpips.config import Config
from mpips.paradigms import make_paradigm
from mpips.paradigms.dssp import closest_meeting
from mpips.paradigms.view import ClusterView

NAN = math.nan


def dssp(low, high, workers=4):
    return make_paradigm(Config(paradigm="dssp", staleness_low=low, staleness_high=high), workers)


def view(clocks, push_times=None, applied=None, done=None, now=100.0):
    clocks = np.asarray(clocks, dtype=np.int64)
    w = len(clocks)
    pt = np.full((w, 2), NAN) if push_times is None else np.asarray(push_times, dtype=float)
    return ClusterView(
        now=now, clocks=clocks,
        applied=clocks.copy() if applied is None else np.asarray(applied, dtype=np.int64),
        push_times=pt, iter_times=np.full(w, NAN),
        done=np.zeros(w, bool) if done is None else np.asarray(done, bool),
        updates=int(clocks.sum()))


# --- the controller ----------------------------------------------------------

def test_equal_speeds_grant_nothing():
    # F_k = 10 + k, S_j = 9.5 + j: every F_k is 0.5 from a push, ties go to k = 0.
    assert closest_meeting(10.0, 1.0, 9.5, 1.0, r_max=5) == 0
    # in phase: F_0 meets S_0
    assert closest_meeting(10.0, 1.0, 10.0, 1.0, r_max=5) == 0


def test_four_times_slower_worker():
    # F = 10..15, S = 8, 12, 16, ...: F_2 = 12 meets S_1.
    assert closest_meeting(10.0, 1.0, 8.0, 4.0, r_max=5) == 2
    # S = 9, 13, 17, ...: F_3 = 13 meets S_1.
    assert closest_meeting(10.0, 1.0, 9.0, 4.0, r_max=5) == 3
    # S = 10.6, 14.6, ...; F = 10..13: F_1 = 11 is 0.4 away, the nearest.
    assert closest_meeting(10.0, 1.0, 10.6, 4.0, r_max=3) == 1


def test_r_max_zero_and_unknown_intervals():
    assert closest_meeting(10.0, 1.0, 8.0, 4.0, r_max=0) == 0
    assert closest_meeting(10.0, NAN, 8.0, 4.0, r_max=5) == 0
    assert closest_meeting(10.0, 1.0, 8.0, NAN, r_max=5) == 0


def test_two_pointer_merge_equals_brute_force():
    rng = np.random.default_rng(1)
    for _ in range(500):
        f0, s0 = rng.uniform(0, 20, 2)
        i_f, i_s = rng.choice([0.0, 0.5, 1.0, 3.0]), rng.uniform(0, 5)
        r_max = int(rng.integers(0, 13))
        f = f0 + np.arange(r_max + 1) * i_f
        s = s0 + np.arange(r_max + 1) * i_s
        dist = np.abs(f[:, None] - s[None, :]).min(axis=1)
        assert closest_meeting(f0, i_f, s0, i_s, r_max) == int(np.argmin(dist))


# --- the gate ----------------------------------------------------------------
# Worker 0 fast (interval 1 s, latest push at 10), worker 3 slow (interval 4 s,
# latest at 8): the controller grants r* = 2 (see test_four_times_slower_worker).
FAST_SLOW = [[10, 9], [10, 9], [9.5, 8.5], [8, 4]]


def test_fastest_beyond_low_gets_credits_then_spends_them():
    p = dssp(1, 6)
    g = p.gate(0, view([3, 3, 2, 1], FAST_SLOW))   # gap 2 > s_L = 1
    assert g.ok
    assert g.event["kind"] == "dssp_controller"
    assert (g.event["fastest"], g.event["slowest"], g.event["r_star"]) == (0, 3, 2)
    assert (g.event["interval_fast"], g.event["interval_slow"]) == (1.0, 4.0)
    assert p.extras(0, 4) == (1.0,)                 # r* = 2, one consumed
    g = p.gate(0, view([4, 3, 2, 1], FAST_SLOW))   # gap 3: on the credit
    assert g.ok and g.event is None
    assert p.extras(0, 5) == (0.0,)
    g = p.gate(0, view([5, 3, 2, 1], [[11, 10], [10, 9], [9.5, 8.5], [8, 4]]))
    assert g.event["r_star"] == 1                  # asked again: F_1 = 12 = S_1


def test_polling_one_clock_decides_once():
    p = dssp(1, 6)
    v = view([3, 3, 2, 1], FAST_SLOW, applied=[2, 3, 2, 1])  # own push not applied yet
    first = p.gate(0, v)
    assert not first.ok and first.waiting_for == (0,)
    assert first.event["r_star"] == 2
    for _ in range(5):
        again = p.gate(0, v)
        assert not again.ok and again.event == first.event
    assert p.extras(0, 4) == (1.0,)                 # one credit consumed, not six
    assert p.gate(0, view([3, 3, 2, 1], FAST_SLOW)).ok


def test_credit_never_carries_beyond_high():
    p = dssp(1, 3)
    p.credits[0] = 5
    g = p.gate(0, view([6, 4, 4, 2], FAST_SLOW))   # gap 4 > s_H = 3
    assert not g.ok and g.waiting_for == (3,)
    assert p.gate(0, view([6, 4, 4, 3], FAST_SLOW)).ok


def test_not_fastest_waits_for_low():
    p = dssp(1, 6)
    g = p.gate(1, view([4, 3, 2, 1], FAST_SLOW))   # worker 1 beyond s_L, worker 0 ahead
    assert not g.ok and g.event is None and g.waiting_for == (3,)
    assert p.extras(1, 4) == (0.0,)


def test_tied_fastest_workers_both_ask():
    p = dssp(1, 6)
    assert p.gate(0, view([3, 3, 2, 1], FAST_SLOW)).event["r_star"] == 2
    assert p.gate(1, view([3, 3, 2, 1], FAST_SLOW)).event["r_star"] == 2


def test_fewer_than_two_pushes_waits_like_ssp_low():
    p = dssp(0, 6)
    one_push = [[1.0, NAN], [NAN, NAN], [NAN, NAN], [NAN, NAN]]
    g = p.gate(0, view([1, 0, 0, 0], one_push))
    assert g.event["r_star"] == 0 and math.isnan(g.event["interval_fast"])
    assert not g.ok and g.waiting_for == (1, 2, 3)
    # the slowest with one push: no interval either
    p = dssp(0, 6)
    g = p.gate(0, view([2, 1, 1, 1], [[2.0, 1.0], [1.5, NAN], [1.5, NAN], [1.5, NAN]]))
    assert g.event["r_star"] == 0 and math.isnan(g.event["interval_slow"])
    assert not g.ok


def test_done_workers_are_neither_slowest_nor_waited_for():
    p = dssp(1, 6)
    g = p.gate(0, view([5, 5, 3, 1], FAST_SLOW, done=[False, False, False, True]))
    # worker 2 (interval 1 s, like worker 0's) is the slowest: r* = 0, wait for it
    assert g.event["slowest"] == 2 and g.event["r_star"] == 0
    assert not g.ok and g.waiting_for == (2,)


def test_r_max_zero_is_ssp_low_over_random_views():
    rng = np.random.default_rng(0)
    for low in (0, 1, 3):
        p = dssp(low, low)
        ssp = make_paradigm(Config(paradigm="ssp", staleness=low), 4)
        for _ in range(2000):
            clocks = rng.integers(0, 12, 4)
            applied = clocks - rng.integers(0, 3, 4).clip(max=clocks)
            done = rng.random(4) < 0.1
            latest = rng.uniform(5, 10, 4)
            pt = np.stack([latest, latest - rng.uniform(0.1, 4, 4)], axis=1)
            pt[rng.random((4, 2)) < 0.1] = NAN
            v = view(clocks, pt, applied=applied, done=done)
            w = int(rng.integers(4))
            a, b = p.gate(w, v), ssp.gate(w, v)
            assert (a.ok, a.waiting_for) == (b.ok, b.waiting_for)


def test_state_round_trip_keeps_the_decision_of_a_waiting_gate():
    p = dssp(1, 6)
    waiting = view([3, 3, 2, 1], FAST_SLOW, applied=[2, 3, 2, 1])
    assert not p.gate(0, waiting).ok                # decided: r* = 2, one credit spent
    q = dssp(1, 6)
    q.load_state(json.loads(json.dumps(p.state())))  # as a checkpoint stores it
    g = q.gate(0, view([3, 3, 2, 1], FAST_SLOW))
    assert g.ok and g.event["r_star"] == 2
    assert q.extras(0, 4) == (1.0,)                 # not spent again


@pytest.mark.parametrize("low,high", [(3, 2), (-1, 4)])
def test_bad_range_is_a_config_error(low, high):
    from mpips.config import ConfigError

    with pytest.raises(ConfigError):
        Config(paradigm="dssp", staleness_low=low, staleness_high=high)
