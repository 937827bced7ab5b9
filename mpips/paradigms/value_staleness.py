"""VSGD's learning-rate rule: damp a push by how far the parameters moved.

Value staleness v = ||w_now - w_read|| / C, with C a running EMA of the norm of
one applied update, so v counts "average updates" the worker missed; the push's
learning rate is eta / max(1, v) (rule 'max') or eta / (1 + lambda v) (rule
'linear'). `distance` is either the exact ||w_now - w_read|| or its cheap upper
bound, the path length (difference of the running sum of applied update norms
between pull and push). Pure Python: the runtime measures, this decides.
"""
from __future__ import annotations

import math

from ..validate import ConfigError

VSGD_RULES = ("max", "linear")   # lr_scale's rules

__all__ = ["UpdateNormEMA", "norm_of_shards", "value_staleness", "lr_scale"]


class UpdateNormEMA:
    """Running EMA of the norm of one applied update: C of value staleness.

    `value` is 0.0 before any update (so `value_staleness` reads 0 and the
    first pushes keep their full step); the first norm seen starts the EMA
    as it is (no bias toward 0), later ones blend in with weight 1 - beta.
    Non-finite norms (a NaN push) are ignored so one bad update cannot
    poison C for the rest of the run.
    """

    def __init__(self, beta: float = 0.9):
        if not (0.0 <= beta < 1.0):
            raise ValueError(f"beta must be in [0, 1), got {beta!r}")
        self.beta = float(beta)
        self.value = 0.0
        self.count = 0

    def update(self, norm: float) -> float:
        """Fold in the norm of one applied update; returns the new value."""
        norm = float(norm)
        if not math.isfinite(norm):
            return self.value
        if norm < 0:
            raise ValueError(f"an update norm is >= 0, got {norm!r}")
        if self.count == 0:
            self.value = norm
        else:
            self.value = self.beta * self.value + (1.0 - self.beta) * norm
        self.count += 1
        return self.value


def norm_of_shards(norms) -> float:
    """C of a sharded model: one update touches every server's shard, so its
    full norm is the root of the sum of squared shard norms. (The path length
    sums shard norms, which is >= that root: with the same C the bound stays
    an upper bound of the exact value, loosened by at most sqrt(servers).)"""
    return math.sqrt(sum(float(n) ** 2 for n in norms))


def value_staleness(distance: float, c: float) -> float:
    """v = distance / C: how many average updates the parameters moved.

    0 when C is 0 or not yet known (nothing applied, nothing to be stale
    against); inf when the distance is not finite (NaN parameters), which
    `lr_scale` turns into a zero step.
    """
    distance = float(distance)
    c = float(c)
    if not (math.isfinite(c) and c > 0):
        return 0.0
    if not math.isfinite(distance):
        return math.inf
    if distance < 0:
        raise ValueError(f"a distance is >= 0, got {distance!r}")
    return distance / c


def lr_scale(v: float, rule: str = "max", lam: float = 1.0) -> float:
    """Factor on the learning rate of a push with value staleness v:
    1 / max(1, v) ('max') or 1 / (1 + lam * v) ('linear')."""
    if rule not in VSGD_RULES:
        raise ConfigError("vsgd_rule", rule, "allowed: " + ", ".join(VSGD_RULES))
    v = float(v)
    if math.isnan(v) or v < 0:
        raise ValueError(f"value staleness is a number >= 0, got {v!r}")
    if math.isinf(v):
        return 0.0
    if rule == "max":
        return 1.0 / max(1.0, v)
    lam = float(lam)
    if not (math.isfinite(lam) and lam >= 0):
        raise ConfigError("vsgd_lambda", lam, "must be >= 0")
    return 1.0 / (1.0 + lam * v)
