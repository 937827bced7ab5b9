"""Emulated heterogeneity: make a homogeneous machine act like a mixed cluster.

A worker's slowdown factor at an iteration is its persistent factor times
the factor of any transient straggle covering that iteration.

With a device-time model (`--device-time`, docs/paradigms.md "Emulated
heterogeneity") an iteration of b samples takes T = factor x (a + c*b**p)
seconds: the worker computes the real gradient, then sleeps until T has
passed since compute began. Without one, the worker sleeps
(factor - 1) x its measured compute, which on a small shared machine mostly
scales CPU contention, not the cluster (BSP with 1,1,2,4 ran at 0.54x its
homogeneous rate where the cluster gives 0.25x): use a device time 10-20x
the real compute for comparisons. Everything is a function of the
configuration and the seed, so runs repeat.
"""
from __future__ import annotations

import numpy as np

from ..heterogeneity import EmulatedCluster, RandomStraggler, Straggle


def random_stragglers(found: RandomStraggler | None, worker: int, seed: int):
    """`worker`'s random straggles (`EmulatedCluster.random_of`): each
    iteration not already slowed starts a straggle with probability `rate`,
    lasting a geometric number of iterations. An endless iterator of
    Straggles in iteration order (under a global budget a worker's iteration
    count is not known in advance)."""
    if found is None:
        return iter(())
    return _random_straggles(np.random.default_rng([seed, worker, 0x57A6]), worker, *found)


def _random_straggles(rng, worker, rate, mean, factor):
    i = 0
    while rate > 0:
        if rng.random() < rate:
            length = int(rng.geometric(1.0 / mean))
            yield Straggle(worker, i, length, factor)
            i += length
        else:
            i += 1


class Slowdown:
    """The slowdown of one worker, iteration by iteration."""

    def __init__(self, config, worker: int, workers: int):
        cluster: EmulatedCluster = config.cluster   # parsed with the configuration
        factors = cluster.slowdowns.factors(workers)
        self.persistent = factors[worker] if factors else 1.0
        self.straggles: list[Straggle] = [s for s in cluster.stragglers if s.worker == worker]
        self._random = random_stragglers(cluster.random_of(worker), worker, config.seed)
        self._drawn: float = 0   # iterations the random straggles are drawn up to (inf: all drawn)
        self.device_time = cluster.device_time

    def _draw(self, iteration: int) -> None:
        while self._drawn <= iteration:
            s = next(self._random, None)
            if s is None:
                self._drawn = float("inf")
                return
            self.straggles.append(s)
            self._drawn = s.start + s.length

    def factor(self, iteration: int) -> float:
        self._draw(iteration)
        f = self.persistent
        for s in self.straggles:
            if s.covers(iteration):
                f *= s.factor
        return f

    def starting(self, iteration: int) -> list[Straggle]:
        self._draw(iteration)
        return [s for s in self.straggles if s.start == iteration]

    def target(self, iteration: int, batch: int, compute: float) -> float:
        """Seconds this iteration's compute should take in all: the modelled
        device time, or without a model the measured compute scaled."""
        f = self.factor(iteration)
        if self.device_time is None:
            return f * compute
        return f * self.device_time.seconds(batch)
