"""Compressors, payload sizes, the GDTopK schedule and group speed (no MPI)."""
import math

import numpy as np
import pytest

from mpips.config import Config, ConfigError
from mpips.paradigms.compress import (
    GDTopK,
    GDTopKSchedule,
    Identity,
    TopK,
    make_compressor,
    payload_nbytes,
    ratio_schedule,
    speed_ranks,
)
from mpips.paradigms.grouping import EpochTimeEMA

TABLE = {  # docs/paradigms.md, GSSP: (epoch 2, 3, 4, >=5), rho
    0: ((0.25, 0.0625, 0.015625, 0.004), 0.008),
    1: ((0.3, 0.09, 0.027, 0.0081), 0.009),
    2: ((0.35, 0.1225, 0.042875, 0.015), 0.01),
}


def grads(steps, n, seed=0, integer=False):
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        if integer:  # small integers: float32 sums are exact
            yield rng.integers(-8, 9, n).astype(np.float32)
        else:
            yield (rng.standard_normal(n) * rng.exponential(1.0, n)).astype(np.float32)


# -- GDTopK selection ------------------------------------------------------------
@pytest.mark.parametrize("c,rho", [(0.35, 0.01), (0.0625, 0.009), (0.01, 0.008), (0.004, 0.008)])
def test_gdtopk_selects_between_08k_and_13k_then_exactly_k(c, rho):
    n = 50_000
    comp = GDTopK(c, rho, seed=1)
    k = math.ceil(n * c)
    for g in grads(5, n, seed=2):
        out = comp.compress(g)
        assert comp.last_k == k
        if comp.last_retries < comp.max_retries:
            assert 0.8 * k <= comp.last_selected
        if comp.last_selected > 1.3 * k:
            assert out.count == k
        else:
            assert out.count == comp.last_selected
        assert out.count <= 1.3 * k


def test_gdtopk_truncates_to_exactly_k_and_keeps_the_largest():
    n = 20_000
    g = np.random.default_rng(3).standard_normal(n).astype(np.float32)
    comp = GDTopK(0.05, 0.01, seed=0)
    comp.HIGH = 1.0  # force the truncation path: anything above k is cut to k
    out = comp.compress(g)
    k = math.ceil(n * 0.05)
    assert comp.last_selected >= k and out.count == k
    assert set(out.indices) == set(np.argsort(-np.abs(g))[:k])


class _PickFirst:
    """Stands in for the sampler: the sample is always entry 0."""

    def choice(self, n, size, replace):
        return np.zeros(size, dtype=np.int64)


def test_gdtopk_lowers_theta_when_too_few_are_selected():
    n = 10_000
    g = np.linspace(2.0, 1.0, n).astype(np.float32)   # entry 0 is the largest
    comp = GDTopK(0.1, 0.001, seed=0)
    comp.rng = _PickFirst()                 # theta = 2.0 selects 1 entry < 0.8k
    out = comp.compress(g)
    k = math.ceil(n * 0.1)
    assert comp.last_retries == 1           # theta 1.6 selects 40% > 1.3k ...
    assert comp.last_selected == int((g >= np.float32(2.0 * 0.8)).sum()) > 1.3 * k
    assert out.count == k                   # ... so the exact top-k of it is sent
    assert set(out.indices) == set(range(k))


def test_gdtopk_retries_at_most_ten_times():
    n = 1000
    g = np.zeros(n, np.float32)
    g[0] = 1e6                              # nothing comes near the spike
    comp = GDTopK(0.5, 0.001, seed=0)
    comp.rng = _PickFirst()
    out = comp.compress(g)
    assert comp.last_retries == 10
    assert comp.last_theta == pytest.approx(1e6 * 0.8 ** 10)
    assert comp.last_selected == 1 and out.count == 1 and out.indices.tolist() == [0]


def test_gdtopk_per_segment():
    sizes = [1000, 10, 5000]
    comp = GDTopK(0.1, 0.05, segments=[(0, 1000), (1000, 1010), (1010, 6010)], seed=0)
    g = next(grads(1, sum(sizes)))
    out = comp.compress(g)
    assert comp.last_k == sum(math.ceil(s * 0.1) for s in sizes)
    idx = out.indices
    assert ((idx >= 1000) & (idx < 1010)).sum() >= 1          # the small tensor sends too
    with pytest.raises(ValueError):
        GDTopK(0.1, 0.05, segments=[(0, 10), (20, 30)]).compress(np.ones(30, np.float32))


def test_gdtopk_is_seeded():
    g = next(grads(1, 30_000))
    a = GDTopK(0.01, 0.008, seed=7).compress(g)
    b = GDTopK(0.01, 0.008, seed=7).compress(g)
    assert np.array_equal(a.indices, b.indices)


# -- error feedback ----------------------------------------------------------------
@pytest.mark.parametrize("make", [lambda: TopK(0.05), lambda: GDTopK(0.05, 0.01, seed=0)])
def test_no_gradient_mass_lost(make):
    n, comp = 4000, make()
    total = np.zeros(n, np.float64)
    sent = np.zeros(n, np.float64)
    for g in grads(8, n, seed=5):
        total += g
        sent += comp.compress(g).to_dense()
        np.testing.assert_allclose(sent + comp.residual, total, rtol=1e-5, atol=1e-4)
    sent += comp.flush()
    np.testing.assert_allclose(sent, total, rtol=1e-5, atol=1e-4)
    assert not comp.residual.any()


@pytest.mark.parametrize("make", [lambda: TopK(0.05), lambda: GDTopK(0.05, 0.01, seed=0)])
def test_epoch_end_flush_is_exact(make):
    n, comp = 3000, make()
    total = np.zeros(n, np.float32)
    sent = np.zeros(n, np.float32)
    for g in grads(10, n, seed=6, integer=True):
        total += g
        comp.compress(g).add_to(sent)
        assert np.array_equal(sent + comp.residual, total)
    sent += comp.flush()
    assert np.array_equal(sent, total)


def test_residual_is_added_to_the_next_gradient():
    comp = TopK(0.25)
    out = comp.compress(np.array([4, 3, 2, 1], np.float32))
    assert out.indices.tolist() == [0] and out.values.tolist() == [4]
    out = comp.compress(np.array([0, 0, 0, 1.5], np.float32))
    assert out.indices.tolist() == [1] and out.values.tolist() == [3]   # 3 beats 2 and 2.5
    assert comp.residual.tolist() == [0, 0, 2, 2.5]


def test_nan_gradient_passes_through_without_poisoning_residual():
    comp = TopK(0.1)
    comp.compress(np.arange(10, dtype=np.float32))
    before = comp.residual
    g = np.ones(10, np.float32)
    g[3] = np.nan
    out = comp.compress(g)
    assert isinstance(out, np.ndarray) and np.isnan(out[3]) and comp.last_nonfinite
    assert np.array_equal(comp.residual, before)


# -- TopK, Identity, sizes ---------------------------------------------------------------
def test_topk_sends_exactly_k_largest():
    n, c = 10_001, 0.013
    g = next(grads(1, n, seed=8))
    out = TopK(c).compress(g)
    k = math.ceil(n * c)
    assert out.count == k and np.all(np.diff(out.indices) > 0)
    assert set(out.indices) == set(np.argsort(-np.abs(g))[:k])
    np.testing.assert_array_equal(out.values, g[out.indices])


def test_identity_is_dense_and_lossless():
    comp = Identity()
    g = next(grads(1, 100))
    out = comp.compress(g)
    assert isinstance(out, np.ndarray) and np.array_equal(out, g) and out is not g
    assert comp.last_nbytes == payload_nbytes(out) == 400
    assert not comp.flush().any()


@pytest.mark.parametrize("c", [0.35, 0.1, 0.01])
def test_sparse_bytes_are_about_two_c_times_dense(c):
    n = 100_000
    comp = TopK(c)
    out = comp.compress(next(grads(1, n)))
    k = math.ceil(n * c)
    assert out.nbytes == comp.last_nbytes == payload_nbytes(out) == 8 * k
    assert out.nbytes / (4 * n) == pytest.approx(2 * c, rel=0.01)  # 4-byte value + 4-byte index per entry


# -- schedule ------------------------------------------------------------------------
def test_schedule_reproduces_the_table():
    for rank, (cs, rho) in TABLE.items():
        assert ratio_schedule(1, rank, 3) == (0.35, pytest.approx(rho))
        for epoch, c in zip((2, 3, 4, 5), cs):
            got_c, got_rho = ratio_schedule(epoch, rank, 3)
            assert got_c == pytest.approx(c, rel=1e-12), (rank, epoch)
            assert got_rho == pytest.approx(rho, rel=1e-12)
        assert ratio_schedule(9, rank, 3)[0] == pytest.approx(cs[-1])


def test_per_group_schedule_from_group_speeds():
    ema = EpochTimeEMA()
    groups = [[0, 1], [2, 3], [4, 5]]
    # group 0 slowest, group 1 fastest, group 2 middle
    for w, t in enumerate([9.0, 11.0, 2.0, 2.0, 5.0, 5.0]):
        ema.update(w, t)
    ranks = speed_ranks([ema.group_time(g) for g in groups])
    assert ranks == [2, 0, 1]
    for epoch in (2, 3, 4, 5):
        got = [ratio_schedule(epoch, r, len(groups)) for r in ranks]
        want = [TABLE[2][0][epoch - 2], TABLE[0][0][epoch - 2], TABLE[1][0][epoch - 2]]
        assert [c for c, _ in got] == pytest.approx(want)
        assert [r for _, r in got] == pytest.approx([0.01, 0.008, 0.009])
    assert [ratio_schedule(1, r, 3)[0] for r in speed_ranks([3.0, 1.0, 2.0])] == [0.35] * 3


def test_schedule_other_group_counts_interpolate():
    two = [ratio_schedule(2, r, 2) for r in range(2)]
    assert two == [(0.25, 0.008), (0.35, 0.01)]
    assert ratio_schedule(2, 0, 1) == (0.3, pytest.approx(0.009))   # G=1: the middle
    five = [ratio_schedule(2, r, 5)[0] for r in range(5)]
    assert five == pytest.approx([0.25, 0.275, 0.3, 0.325, 0.35])
    custom = GDTopKSchedule(r0=(0.5,), rho=(0.02,), floor=(0.1,), first_ratio=1.0, floor_epoch=3)
    assert [ratio_schedule(e, 0, 4, custom)[0] for e in (1, 2, 3, 4)] == [1.0, 0.5, 0.1, 0.1]
    with pytest.raises(ConfigError):
        GDTopKSchedule(r0=(0.0, 0.5))
    with pytest.raises(ValueError):
        ratio_schedule(0, 0, 3)


def test_epoch_time_ema():
    ema = EpochTimeEMA()
    assert ema.update(0, 10.0) == 10.0
    assert ema.update(0, 20.0) == pytest.approx(0.3 * 10 + 0.7 * 20)
    ema.update(1, 4.0)
    assert ema.group_time([0, 1]) == pytest.approx((17.0 + 4.0) / 2)
    assert math.isnan(ema.group_time([5]))
    assert speed_ranks([ema.group_time(g) for g in ([5], [0], [1])]) == [2, 1, 0]   # unseen ranks slowest


def test_set_ratio_changes_k():
    comp = GDTopK(0.35, 0.01, seed=0)
    g = next(grads(1, 20_000))
    comp.compress(g)
    assert comp.last_k == 7000
    comp.set_ratio(*ratio_schedule(5, 0, 3))
    comp.compress(g)
    assert comp.last_k == 80 and comp.rho == 0.008


# -- factory ---------------------------------------------------------------------------
def test_make_compressor():
    assert isinstance(make_compressor(Config(compressor="none")), Identity)
    t = make_compressor(Config(compressor="topk", topk_ratio=0.02))
    assert isinstance(t, TopK) and t.ratio == 0.02
    g = make_compressor(Config(compressor="gdtopk"), rank=0, groups=3, stream=2)
    assert isinstance(g, GDTopK) and g.ratio == 0.35 and g.rho == 0.008
    cfg = Config(compressor="gdtopk")
    x = next(grads(1, 50_000))
    a = make_compressor(cfg, stream=0).compress(x)
    b = make_compressor(cfg, stream=0).compress(x)
    assert np.array_equal(a.indices, b.indices)
    with pytest.raises(ConfigError):
        TopK(0.0)
