"""VSGD's value-staleness learning-rate rule (pure)."""
import math

import pytest

from mpips.config import ConfigError
from mpips.paradigms.value_staleness import UpdateNormEMA, lr_scale, value_staleness


def test_rule_max():
    assert lr_scale(0.0) == 1.0
    assert lr_scale(0.5) == 1.0
    assert lr_scale(1.0) == 1.0
    assert lr_scale(4.0, "max") == 0.25
    assert lr_scale(math.inf) == 0.0


def test_rule_linear():
    assert lr_scale(0.0, "linear") == 1.0
    assert lr_scale(4.0, "linear", lam=1.0) == pytest.approx(0.2)
    assert lr_scale(4.0, "linear", lam=0.5) == pytest.approx(1 / 3)
    assert lr_scale(4.0, "linear", lam=0.0) == 1.0
    assert lr_scale(0.5, "linear", lam=1.0) == pytest.approx(2 / 3)  # damps even v < 1


def test_rule_errors_name_the_field():
    with pytest.raises(ConfigError) as e:
        lr_scale(1.0, "sqrt")
    assert e.value.field == "vsgd_rule"
    with pytest.raises(ConfigError) as e:
        lr_scale(1.0, "linear", lam=-1.0)
    assert e.value.field == "vsgd_lambda"
    with pytest.raises(ValueError):
        lr_scale(float("nan"))
    with pytest.raises(ValueError):
        lr_scale(-1.0)


def test_value_staleness_is_in_average_updates():
    assert value_staleness(3.0, 1.5) == 2.0
    assert value_staleness(3.0, 0.0) == 0.0         # no update applied yet
    assert value_staleness(0.0, 2.0) == 0.0
    assert value_staleness(float("nan"), 1.0) == math.inf
    with pytest.raises(ValueError):
        value_staleness(-1.0, 1.0)


def test_update_norm_ema():
    c = UpdateNormEMA(beta=0.9)
    assert c.value == 0.0 and c.count == 0
    assert c.update(2.0) == 2.0                     # first norm starts the EMA
    assert c.update(4.0) == pytest.approx(0.9 * 2.0 + 0.1 * 4.0)
    c.update(float("nan"))                          # a NaN push is ignored
    assert c.value == pytest.approx(2.2) and c.count == 2
    for _ in range(200):
        c.update(1.0)
    assert c.value == pytest.approx(1.0)
    with pytest.raises(ValueError):
        c.update(-1.0)
    with pytest.raises(ValueError):
        UpdateNormEMA(beta=1.0)


def test_normalisation_end_to_end():
    # steady updates of norm 0.1; a worker that missed 8 of them (path length
    # 0.8) has v = 8 and gets 1/8 of the step; one that missed none, full step
    c = UpdateNormEMA()
    for _ in range(10):
        c.update(0.1)
    assert lr_scale(value_staleness(0.8, c.value)) == pytest.approx(1 / 8)
    assert lr_scale(value_staleness(0.0, c.value)) == 1.0
    # scale invariance: the same motion measured in larger units, same v
    c2 = UpdateNormEMA()
    for _ in range(10):
        c2.update(10.0)
    assert value_staleness(80.0, c2.value) == pytest.approx(value_staleness(0.8, c.value))
