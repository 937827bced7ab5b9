"""Emulated heterogeneity: make a homogeneous machine act like a mixed cluster.

A worker's slowdown factor at an iteration is its persistent factor times
the factor of any transient straggle covering that iteration; after
computing, the worker sleeps (factor - 1) x its measured compute time.
Everything is a function of the configuration and the seed, so runs repeat.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .config import ConfigError


@dataclass(frozen=True)
class Straggle:
    worker: int
    start: int       # first slowed iteration
    length: int      # iterations slowed
    factor: float

    def covers(self, iteration: int) -> bool:
        return self.start <= iteration < self.start + self.length


def parse_stragglers(text: str, workers: int | None) -> list[Straggle]:
    """'worker:start_iter:iters:factor[,...]' -> explicit transient stragglers
    (workers None: the syntax only, before the number of workers is known)."""
    out = []
    for item in filter(None, (s.strip() for s in text.split(","))):
        parts = item.split(":")
        try:
            w, start, length, factor = int(parts[0]), int(parts[1]), int(parts[2]), float(parts[3])
            if len(parts) != 4:
                raise ValueError
        except (ValueError, IndexError):
            raise ConfigError("straggler", text,
                              "entries worker:start_iter:iters:factor, e.g. 3:20:30:4") from None
        if (not 0 <= w < (workers if workers is not None else w + 1) or start < 0 or length < 1
                or not math.isfinite(factor) or factor < 1):
            top = f"in 0..{workers - 1}" if workers is not None else ">= 0"
            raise ConfigError("straggler", item,
                              f"worker {top}, start >= 0, iters >= 1, factor >= 1 (finite)")
        out.append(Straggle(w, start, length, factor))
    return out


def random_stragglers(text: str, worker: int, iterations: int, seed: int) -> list[Straggle]:
    """'rate:mean_iters:factor': each iteration not already slowed starts a
    straggle with probability `rate`, lasting a geometric number of iterations."""
    if not text:
        return []
    rate, mean, factor = parse_random_stragglers(text)
    rng = np.random.default_rng([seed, worker, 0x57A6])
    out, i = [], 0
    while i < iterations:
        if rng.random() < rate:
            length = int(rng.geometric(1.0 / mean))
            out.append(Straggle(worker, i, length, factor))
            i += length
        else:
            i += 1
    return out


def parse_random_stragglers(text: str) -> tuple[float, float, float] | None:
    """'rate:mean_iters:factor' -> its three numbers (None for '')."""
    if not text:
        return None
    try:
        rate, mean, factor = (float(x) for x in text.split(":"))
    except ValueError:
        raise ConfigError("random_stragglers", text, "rate:mean_iters:factor, e.g. 0.01:20:4") from None
    # finite: an infinite mean or factor would stall a worker for ever
    if not (0 <= rate <= 1 and 1 <= mean < math.inf and 1 <= factor < math.inf):
        raise ConfigError("random_stragglers", text,
                          "rate in [0,1], mean_iters >= 1, factor >= 1 (both finite)")
    return rate, mean, factor


class Slowdown:
    """The slowdown of one worker, iteration by iteration."""

    def __init__(self, config, worker: int, workers: int, iterations: int):
        factors = config.slowdown_factors()
        if factors and len(factors) != workers:
            raise ConfigError("slowdown", config.slowdown,
                              f"needs one factor per worker ({workers} workers)")
        self.persistent = factors[worker] if factors else 1.0
        self.straggles = [s for s in parse_stragglers(config.straggler, workers) if s.worker == worker]
        self.straggles += random_stragglers(config.random_stragglers, worker, iterations, config.seed)

    def factor(self, iteration: int) -> float:
        f = self.persistent
        for s in self.straggles:
            if s.covers(iteration):
                f *= s.factor
        return f

    def starting(self, iteration: int) -> list[Straggle]:
        return [s for s in self.straggles if s.start == iteration]
