"""The VSGD paradigm: given views and distances, the push scale and lr_scale."""
import math

import numpy as np
import pytest

from mpips.config import Config
from mpips.paradigms import ClusterView, make_paradigm
from mpips.paradigms.value_staleness import norm_of_shards
from mpips.paradigms.vsgd import VSGD

W = 4


def vsgd(**kw):
    p = make_paradigm(Config(paradigm="vsgd", **kw), W)
    assert isinstance(p, VSGD)
    return p


def view(*, path=0.0, c=0.0, clocks=(0, 0, 0, 0), applied=None):
    clocks = np.array(clocks, dtype=np.int64)
    return ClusterView(
        now=1.0, clocks=clocks, applied=clocks.copy() if applied is None else np.array(applied),
        push_times=np.full((W, 2), np.nan), iter_times=np.full(W, np.nan),
        done=np.zeros(W, bool), updates=int(clocks.sum()),
        path_length=path, update_norm_ema=c)


def push(p, v, *, read_path=0.0, distance=math.nan):
    return p.push(0, v, batch_size=16, read_updates=0, read_path_length=read_path, distance=distance)


def test_bound_measure_damps_by_path_length_in_average_updates():
    p = vsgd(value_measure="bound")
    assert not p.wants_exact_distance
    d = push(p, view(path=1.3, c=0.1), read_path=0.5)    # moved 0.8 = 8 average updates
    assert d.lr_scale == pytest.approx(1 / 8)
    assert d.scale == pytest.approx(1 / 8 / W)           # the base 1/W stays
    assert d.info["value_staleness_bound"] == pytest.approx(8.0)
    assert math.isnan(d.info["value_staleness"])         # exact not measured


def test_fresh_or_barely_moved_push_keeps_its_full_step():
    p = vsgd(value_measure="bound")
    d = push(p, view(path=2.0, c=0.1), read_path=2.0)
    assert d.lr_scale == 1.0 and d.scale == pytest.approx(1 / W)
    d = push(p, view(path=2.05, c=0.1), read_path=2.0)   # half an update: max(1, v) = 1
    assert d.lr_scale == 1.0
    d = push(p, view(path=0.0, c=0.0))                    # nothing applied yet: C unknown
    assert d.lr_scale == 1.0 and d.info["value_staleness_bound"] == 0.0


def test_exact_measure_uses_the_distance_and_logs_both():
    p = vsgd(value_measure="exact")
    assert p.wants_exact_distance
    # path length says 10 updates, but they cancelled: the parameters moved 2
    d = push(p, view(path=1.0, c=0.1), read_path=0.0, distance=0.2)
    assert d.lr_scale == pytest.approx(1 / 2)
    assert d.scale == pytest.approx(1 / 2 / W)
    assert d.info["value_staleness"] == pytest.approx(2.0)
    assert d.info["value_staleness_bound"] == pytest.approx(10.0)
    # NaN parameters (a distance that is not finite): a zero step, not a NaN one
    d = push(p, view(path=1.0, c=0.1), distance=math.nan)
    assert d.lr_scale == 0.0 and d.scale == 0.0


def test_linear_rule_and_lambda():
    p = vsgd(value_measure="bound", vsgd_rule="linear", vsgd_lambda=0.5)
    d = push(p, view(path=0.4, c=0.1))                    # v = 4: 1 / (1 + 0.5 * 4)
    assert d.lr_scale == pytest.approx(1 / 3)
    assert d.scale == pytest.approx(1 / 3 / W)
    d = push(p, view(path=0.05, c=0.1))                   # linear damps v < 1 too
    assert d.lr_scale == pytest.approx(1 / 1.25)


def test_c_is_read_from_the_view_at_push():
    # the same motion against larger average updates is less stale
    p = vsgd(value_measure="exact")
    small = push(p, view(path=1.0, c=0.1), distance=0.6)
    large = push(p, view(path=1.0, c=0.3), distance=0.6)
    assert small.lr_scale == pytest.approx(1 / 6)
    assert large.lr_scale == pytest.approx(1 / 2)


def test_gating_ssp_or_asp():
    ahead = dict(clocks=(9, 4, 4, 4))                     # worker 0 is 5 clocks ahead
    assert not vsgd(gate="ssp", staleness=3).gate(0, view(**ahead)).ok
    assert vsgd(gate="ssp", staleness=5).gate(0, view(**ahead)).ok
    g = vsgd(gate="ssp", staleness=3).gate(0, view(**ahead))
    assert g.waiting_for == (1, 2, 3)
    assert vsgd(gate="asp").gate(0, view(**ahead)).ok
    assert vsgd(gate="asp").gate(0, view(clocks=(100, 0, 0, 0))).ok


def test_c_of_sharded_updates_keeps_the_bound_an_upper_bound():
    rng = np.random.default_rng(0)
    bounds = [(0, 30), (30, 70), (70, 100)]              # three servers' shards
    steps = rng.normal(size=(12, 100)) * rng.uniform(0.1, 2.0, size=(12, 1))
    # C: the root-sum-square of shard norms is the full update's norm
    for d in steps:
        assert norm_of_shards([np.linalg.norm(d[a:b]) for a, b in bounds]) == pytest.approx(
            np.linalg.norm(d))
    # the path length the servers publish, summed over shards, bounds the distance
    path = sum(np.linalg.norm(d[a:b]) for d in steps for a, b in bounds)
    distance = np.linalg.norm(steps.sum(axis=0))
    c = norm_of_shards([np.linalg.norm(steps[-1][a:b]) for a, b in bounds])
    p = vsgd(value_measure="exact")
    d = push(p, view(path=path, c=c), distance=distance)
    assert d.info["value_staleness_bound"] >= d.info["value_staleness"]
    # ... and is at most sqrt(servers) looser per update than full norms
    assert path <= math.sqrt(len(bounds)) * sum(np.linalg.norm(d) for d in steps) + 1e-9
    assert norm_of_shards([]) == 0.0
