"""LB-BSP speed predictors (pure numpy)."""
import math

import numpy as np
import pytest

from mpips.config import ConfigError
from mpips.paradigms.predict import EWMA, NARX, LastValue, SpeedPredictor, make_predictor, utilisation


def periodic_load_trace(n=200, seed=0):
    """speed = 100 - 40 * load, load on for half of every 10 rounds; the CPU
    utilisation of round k already shows the load of round k + 1 (the other
    tenant starts before it bites), plus small noise everywhere."""
    rng = np.random.default_rng(seed)
    k = np.arange(n + 1)
    load = ((k % 10) >= 5).astype(float)
    speed = 100.0 - 40.0 * load + rng.normal(0, 1.0, n + 1)
    cpu = np.clip(0.2 + 0.6 * np.roll(load, -1) + rng.normal(0, 0.03, n + 1), 0, 1)
    mem = np.clip(0.5 + rng.normal(0, 0.01, n + 1), 0, 1)
    return speed, cpu, mem


def prediction_errors(pred: SpeedPredictor, speed, cpu, mem):
    errs = []
    for k in range(len(speed) - 1):
        pred.observe(speed[k], cpu[k], mem[k])
        errs.append(abs(pred.predict() - speed[k + 1]))
    return np.array(errs)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_narx_beats_last_value_on_periodic_load(seed):
    trace = periodic_load_trace(seed=seed)
    last = prediction_errors(LastValue(), *trace)[-100:].mean()
    narx = prediction_errors(NARX(seed=seed), *trace)[-100:].mean()
    assert last > 6.0                # misses every load edge by ~40
    assert narx < 0.5 * last


def test_narx_is_deterministic_and_falls_back_to_last_value():
    speed, cpu, mem = periodic_load_trace(n=60)
    p, q = NARX(delay=3, seed=7), NARX(delay=3, seed=7)
    assert math.isnan(p.predict())
    for k in range(2 * 3 + 1):       # fewer than 2d + 2 points: last value
        p.observe(speed[k], cpu[k], mem[k])
        assert p.predict() == speed[k]
    a = prediction_errors(NARX(seed=3), speed, cpu, mem)
    b = prediction_errors(NARX(seed=3), speed, cpu, mem)
    assert np.array_equal(a, b)
    for k in range(60):
        q.observe(speed[k], cpu[k], mem[k])
    assert q.predict() > 0


def test_narx_ignores_bad_speeds():
    # Its cost (~0.1 ms per round) is measured in benchmarks, not asserted here.
    speed, cpu, mem = periodic_load_trace(n=300, seed=5)
    p = NARX()
    p.observe(float("nan"), 0.5, 0.5)
    p.observe(0.0, 0.5, 0.5)
    assert math.isnan(p.predict())
    for k in range(300):
        p.observe(speed[k], cpu[k], float("nan"))
        p.predict()
    assert math.isfinite(p.predict())


def test_ewma():
    e = EWMA(alpha=0.5)
    assert math.isnan(e.predict())
    e.observe(100.0, 0.1, 0.1)
    assert e.predict() == 100.0      # the first observation starts it
    e.observe(50.0)
    assert e.predict() == 75.0
    e.observe(float("nan"))
    e.observe(-3.0)
    assert e.predict() == 75.0       # failed measurements are ignored
    for _ in range(50):
        e.observe(20.0)
    assert e.predict() == pytest.approx(20.0)
    with pytest.raises(ValueError):
        EWMA(alpha=0.0)


def test_last_value():
    p = LastValue()
    assert math.isnan(p.predict())
    p.observe(3.0)
    p.observe(4.0)
    assert p.predict() == 4.0


def test_make_predictor():
    assert isinstance(make_predictor("ewma", seed=1), EWMA)
    assert isinstance(make_predictor("narx", seed=1), NARX)
    with pytest.raises(ConfigError) as e:
        make_predictor("arima", seed=0)
    assert e.value.field == "predictor" and "narx" in str(e.value)


@pytest.mark.parametrize("cpu_percent, mem_percent, expected", [
    (42.5, 61.0, (0.425, 0.61)),                   # psutil's percentages as fractions
    (150.0, -3.0, (1.0, 0.0)),                     # out-of-range readings clamped
    (float("nan"), float("inf"), (0.0, 0.0)),      # a missing reading counts as idle
])
def test_utilisation_is_psutils_reading_as_a_fraction(monkeypatch, cpu_percent, mem_percent, expected):
    import types

    import psutil

    monkeypatch.setattr(psutil, "cpu_percent", lambda interval=None: cpu_percent)
    monkeypatch.setattr(psutil, "virtual_memory", lambda: types.SimpleNamespace(percent=mem_percent))
    assert utilisation() == pytest.approx(expected)


def test_utilisation_reads_this_machine():
    import psutil

    _, mem = utilisation()
    assert mem == pytest.approx(psutil.virtual_memory().percent / 100, abs=0.05)
    assert mem > 0   # something is in memory: this process
