"""LB-BSP batch allocation and refinement (pure numpy, no MPI)."""
import numpy as np
import pytest

from mpips.config import ConfigError
from mpips.paradigms.balance import BatchRefiner, allocate


def _ideal(total, speeds):
    v = np.asarray(speeds, dtype=float)
    return total * v / v.sum()


@pytest.mark.parametrize("seed", range(20))
def test_allocation_sums_and_is_proportional_within_rounding(seed):
    rng = np.random.default_rng(seed)
    w = int(rng.integers(1, 9))
    speeds = rng.uniform(10, 200, w)
    total = int(rng.integers(4 * w, 2000))
    x = allocate(total, speeds)
    assert x.dtype.kind == "i"
    assert x.sum() == total
    assert (x >= 1).all()
    ideal = _ideal(total, speeds)
    if (ideal >= 1).all():  # the floor of 1 does not bind
        assert np.all(np.abs(x - ideal) < 1)


def test_exact_split_and_deterministic_ties():
    assert allocate(100, [1, 2, 3, 4]).tolist() == [10, 20, 30, 40]
    assert allocate(10, [1, 1, 1]).tolist() == [4, 3, 3]   # remainder to the lowest index
    assert allocate(10, [1, 1, 1]).tolist() == allocate(10, [1, 1, 1]).tolist()


@pytest.mark.parametrize("seed", range(20))
def test_cap_and_floor_are_respected(seed):
    rng = np.random.default_rng(100 + seed)
    w = int(rng.integers(2, 9))
    speeds = rng.lognormal(0, 2, w)  # very uneven: both bounds bind
    cap = int(rng.integers(2, 50))
    total = int(rng.integers(w, cap * w + 1))
    x = allocate(total, speeds, cap=cap)
    assert x.sum() == total
    assert (x >= 1).all() and (x <= cap).all()


@pytest.mark.parametrize("w", [256, 1024])
def test_allocation_at_hundreds_of_workers_is_the_water_filling_split(w):
    """Every speed distinct (2W breakpoints), both bounds binding: the
    batches round the shares clip(lam v_i, 1, cap) that sum to the global
    batch, lam found here by plain bisection."""
    rng = np.random.default_rng(w)
    speeds = rng.lognormal(0, 1, w)
    cap, total = 40, 16 * w
    x = allocate(total, speeds, cap=cap)
    assert x.sum() == total and (x >= 1).all() and (x <= cap).all()
    low, high = 0.0, cap / speeds.min()
    for _ in range(200):
        lam = (low + high) / 2
        low, high = (lam, high) if np.clip(lam * speeds, 1, cap).sum() < total else (low, lam)
    shares = np.clip(high * speeds, 1, cap)
    assert (shares == 1).any() and (shares == cap).any()
    assert np.all(np.abs(x - shares) < 1)


def test_rounding_moves_each_worker_by_one_at_most_and_never_past_a_bound():
    from mpips.paradigms.balance import _round_to_sum
    # up: largest remainders first, worker 0 at the cap skipped (9 cannot be met)
    assert _round_to_sum(np.array([3.0, 2.2, 1.9]), 9, 1, 3).tolist() == [3, 3, 2]
    # down: smallest remainders first, worker 0 at the floor skipped
    assert _round_to_sum(np.array([1.0, 2.7, 2.2]), 4, 1, 3).tolist() == [1, 2, 1]


def test_cap_cut_goes_to_the_others_proportionally():
    # worker 3 would get 87 of 100; capped at 40, the other 60 split 1:2:3
    assert allocate(100, [1, 2, 3, 40], cap=40).tolist() == [10, 20, 30, 40]


def test_floor_of_one():
    x = allocate(10, [1, 1000, 1, 1])
    assert x.tolist() == [1, 7, 1, 1]
    assert allocate(4, [1, 2, 3, 4]).tolist() == [1, 1, 1, 1]


def test_unknown_speeds_get_the_mean_of_the_known():
    assert allocate(100, [0, float("nan"), 1, 3]).tolist() == [25, 25, 13, 37]
    assert allocate(9, [0, -1, float("nan")]).tolist() == [3, 3, 3]
    assert allocate(7, [float("inf"), 2, 2]).tolist() == [3, 2, 2]


def test_infeasible_global_batch_names_the_field():
    with pytest.raises(ConfigError) as e:
        allocate(3, [1, 1, 1, 1])
    assert e.value.field == "global_batch" and "number of workers" in str(e.value)
    with pytest.raises(ConfigError) as e:
        allocate(41, [1, 1, 1, 1], cap=10)
    assert e.value.field == "global_batch" and "batch_cap" in str(e.value)
    assert allocate(40, [1, 1, 1, 9], cap=10).tolist() == [10, 10, 10, 10]


def _times(x, a, b):
    return a * np.asarray(x, dtype=float) ** 1.5 + b


@pytest.mark.parametrize("seed", range(10))
def test_refiner_converges_on_nonlinear_time_model(seed):
    rng = np.random.default_rng(seed)
    w, total, eps = 4, 1024, 0.05
    a = rng.uniform(1e-3, 8e-3, w)
    b = rng.uniform(0.0, 0.2, w)
    x = allocate(total, np.ones(w))           # start from the linear-model guess
    ref = BatchRefiner(total, epsilon=eps)
    for _ in range(100):
        x = ref.update(x, _times(x, a, b))
        assert x.sum() == total and (x >= 1).all()
        if ref.converged:
            break
    t = _times(x, a, b)
    assert (t.max() - t.min()) / t.max() <= eps
    assert ref.converged
    # once balanced, it stays put
    assert ref.update(x, t).tolist() == x.tolist()


def test_refiner_respects_cap_halves_on_reversal_and_settles():
    # epsilon 1% is finer than one sample buys here: it must settle, not oscillate
    total, cap = 300, 150
    a = np.array([1e-3, 1e-3, 1e-2])
    x = np.array([100, 100, 100])
    ref = BatchRefiner(total, epsilon=0.01, initial_step=32, cap=cap)
    steps, spreads = [], []
    for _ in range(40):
        spreads.append(ref.spread(_times(x, a, 0.0)))
        x = ref.update(x, _times(x, a, 0.0))
        steps.append(ref.step)
        assert x.sum() == total and (x >= 1).all() and (x <= cap).all()
    assert steps[0] == 32 and steps[-1] == 1            # halved down to one sample
    assert all(s1 >= s2 for s1, s2 in zip(steps, steps[1:]))
    assert ref.settled and not ref.converged
    final = ref.spread(_times(x, a, 0.0))
    assert final == pytest.approx(min(spreads)) and final < 0.05   # the best split seen
    assert ref.update(x, _times(x, a, 0.0)).tolist() == x.tolist()  # no more moves
    ref.reset()
    assert not ref.settled and ref.step == 32


def test_refiner_skips_bad_rounds_and_checks_the_sum():
    ref = BatchRefiner(10)
    assert ref.update([5, 5], [1.0, float("nan")]).tolist() == [5, 5]
    with pytest.raises(ValueError):
        ref.update([5, 4], [1.0, 2.0])


@pytest.mark.parametrize("seed", range(20))
def test_with_fixed_seconds_every_round_ends_together_within_a_sample(seed):
    # x_i = v_i (T - t_i): t_i + x_i / v_i is one T for every worker the floor or cap leaves alone
    rng = np.random.default_rng(seed)
    w = int(rng.integers(2, 9))
    speeds, fixed = rng.uniform(100, 2000, w), rng.uniform(0, 0.05, w)
    total = int(rng.integers(4 * w, 2000))
    cap = int(rng.choice([0, total // w + 5]))
    x = allocate(total, speeds, cap, fixed)
    assert x.sum() == total and (x >= 1).all() and (cap == 0 or (x <= cap).all())
    free = (x > 1) & ((x < cap) if cap else True)
    ends = fixed + x / speeds
    if free.sum() >= 2:
        assert np.ptp(ends[free]) <= (2 / speeds[free]).max()
    # the floor binds only on a worker whose fixed seconds leave it no more of the common end
    if free.any():
        assert all(ends[i] >= ends[free].max() - (1 / speeds[free]).max() for i in np.flatnonzero(x == 1))


def test_fixed_seconds_that_take_the_whole_round_leave_one_sample():
    assert allocate(100, [1000] * 4, fixed=[0.0, 0.0, 0.0, 10.0]).tolist() == [33, 33, 33, 1]


def test_equal_or_no_fixed_seconds_split_by_speed_alone():
    speeds = [4000, 4000, 2000, 1000]
    assert allocate(220, speeds).tolist() == allocate(220, speeds, fixed=[0.0] * 4).tolist() == [80, 80, 40, 20]
    assert allocate(220, speeds, fixed=[0.01] * 4).tolist() == [80, 80, 40, 20]


def test_unknown_fixed_seconds_are_the_mean_of_the_known_ones():
    known = allocate(300, [1000] * 3, fixed=[0.01, 0.03, 0.02])
    assert allocate(300, [1000] * 3, fixed=[0.01, 0.03, -1.0]).tolist() == known.tolist()
    assert allocate(300, [1000] * 3, fixed=[-1.0, float("nan"), -1.0]).tolist() == [100, 100, 100]
    with pytest.raises(ValueError, match="fixed times"):
        allocate(300, [1000] * 3, fixed=[0.01])
