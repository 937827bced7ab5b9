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

import itertools
import math
import re
from dataclasses import dataclass

import numpy as np

from ..validate import ConfigError


@dataclass(frozen=True)
class Straggle:
    worker: int
    start: int       # first slowed iteration
    length: int      # iterations slowed
    factor: float

    def covers(self, iteration: int) -> bool:
        return self.start <= iteration < self.start + self.length


@dataclass(frozen=True)
class DeviceTime:
    """Modelled seconds of one iteration on b samples: a + c * b**p."""

    a: float
    c: float
    p: float = 1.0

    def seconds(self, batch: int) -> float:
        return self.a + self.c * batch ** self.p


_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6}
_DEVICE_TIME_HELP = ("a duration with its unit (s, ms or us) such as 20ms (at batch-size, linear in "
                     "the batch), or a=2ms,c=1ms,p=0.8 for a + c*b**p seconds (a, c >= 0, p > 0)")


def _duration(text: str) -> float:
    m = re.fullmatch(r"\s*([0-9.eE+-]+)\s*(s|ms|us)?\s*", text)
    if not m:
        raise ValueError(text)
    if m.group(2) is None and float(m.group(1)) != 0:
        # every example says 20ms: a bare 20 would be 20 s an iteration, silently
        raise ValueError(text)
    value = float(m.group(1)) * _UNITS[m.group(2) or "s"]
    if not np.isfinite(value) or value < 0:
        raise ValueError(text)
    return value


def parse_device_time(text: str, batch_size: int) -> DeviceTime | None:
    """'20ms' -> 20 ms at `batch_size`, linear in b; 'a=..,c=..,p=..' -> the
    general model; '' -> None (no emulated device time)."""
    if not text:
        return None
    try:
        if "=" not in text:
            seconds = _duration(text)
            if seconds <= 0:
                raise ValueError(text)
            return DeviceTime(0.0, seconds / batch_size, 1.0)
        parts = dict(item.split("=", 1) for item in text.split(","))
        if not parts or set(parts) - {"a", "c", "p"}:
            raise ValueError(text)
        p = float(parts.get("p", "1"))
        model = DeviceTime(_duration(parts.get("a", "0")), _duration(parts.get("c", "0")), p)
        if not (np.isfinite(p) and p > 0) or model.seconds(1) <= 0:
            raise ValueError(text)
        return model
    except ValueError:
        raise ConfigError("device_time", text, _DEVICE_TIME_HELP) from None


_SLOWDOWN_FORMS = ("factors >= 1 (finite), one factor per worker, worker 0 first: '1,1,2,4', "
                   "or FACTORxCOUNT items (COUNT >= 1) among them, e.g. '1x6,4x2'")


def parse_slowdown(text: str, workers: int | None = None) -> list[float]:
    """'1,1,2,4' or FACTORxCOUNT items mixed with plain factors ('1x48,2x12,4x4':
    48 workers at 1, then 12 at 2, then 4 at 4) -> one factor per worker
    ([] for ''); workers None: the syntax only, before the number of workers
    is known."""
    runs = []
    for item in (s.strip() for s in text.split(",")) if text else ():
        factor, x, count = item.partition("x")
        try:
            f = float(factor)
            if x and not count.strip().isdecimal():   # int() would take '-1', '+2', '1_0'
                raise ValueError
            n = int(count) if x else 1
        except ValueError:
            raise ConfigError("slowdown", text,
                              f"{item!r} is not a number nor FACTORxCOUNT; {_SLOWDOWN_FORMS}") from None
        if not math.isfinite(f) or f < 1 or n < 1:
            raise ConfigError("slowdown", text, f"{item!r}: {_SLOWDOWN_FORMS}")
        runs.append((f, n))
    given = sum(n for _, n in runs)
    if workers is not None and runs and given != workers:
        raise ConfigError("slowdown", text, f"{given} factors for {workers} workers; give {_SLOWDOWN_FORMS}")
    return [f for f, n in runs for _ in range(n)]


def format_slowdown(factors: list[float]) -> str:
    """Per-worker factors as parse_slowdown reads them back, a run of 3 or more
    equal factors as FxN: 64 workers fit a table cell ('1x48,2x12,4x4'),
    '1,1,2,4' stays as it is."""
    items = []
    for f, run in itertools.groupby(float(f) for f in factors):
        n = len(list(run))
        shown = str(int(f)) if f.is_integer() else repr(f)   # repr: exact, so it reads back the same
        items += [f"{shown}x{n}"] if n >= 3 else [shown] * n
    return ",".join(items)


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


def random_stragglers(text: str, worker: int, seed: int, workers: int | None = None):
    """'rate:mean_iters:factor' (one for every worker, or one per worker):
    each iteration not already slowed starts a straggle with probability
    `rate`, lasting a geometric number of iterations. An endless iterator
    of Straggles in iteration order (under a global budget a worker's
    iteration count is not known in advance)."""
    if not text:
        return iter(())
    items = parse_random_stragglers(text, workers)
    rate, mean, factor = items[worker] if len(items) > 1 else items[0]
    return _random_straggles(np.random.default_rng([seed, worker, 0x57A6]), worker, rate, mean, factor)


def _random_straggles(rng, worker, rate, mean, factor):
    i = 0
    while rate > 0:
        if rng.random() < rate:
            length = int(rng.geometric(1.0 / mean))
            yield Straggle(worker, i, length, factor)
            i += length
        else:
            i += 1


_RANDOM_FORMS = ("rate:mean_iters:factor, e.g. 0.01:20:4, for every worker, or one per worker "
                 "separated by commas")


def parse_random_stragglers(text: str, workers: int | None = None) -> list[tuple[float, float, float]]:
    """'rate:mean_iters:factor' -> [its three numbers] (every worker's);
    'r:m:f,r:m:f,...' -> one triple per worker (a measured cluster's,
    mpips/experiments/profile.py); '' -> []. `workers` None: the syntax only."""
    out = []
    for item in (s.strip() for s in text.split(",")) if text else ():
        try:
            rate, mean, factor = (float(x) for x in item.split(":"))
        except ValueError:
            raise ConfigError("random_stragglers", text, _RANDOM_FORMS) from None
        # finite: an infinite mean or factor would stall a worker for ever
        if not (0 <= rate <= 1 and 1 <= mean < math.inf and 1 <= factor < math.inf):
            raise ConfigError("random_stragglers", text,
                              f"{item!r}: rate in [0,1], mean_iters >= 1, factor >= 1 (both finite)")
        out.append((rate, mean, factor))
    if workers is not None and len(out) > 1 and len(out) != workers:
        raise ConfigError("random_stragglers", text, f"{len(out)} items for {workers} workers; give "
                                                     f"{_RANDOM_FORMS}")
    return out


class Slowdown:
    """The slowdown of one worker, iteration by iteration."""

    def __init__(self, config, worker: int, workers: int):
        factors = config.slowdown_factors(workers)
        self.persistent = factors[worker] if factors else 1.0
        self.straggles = [s for s in parse_stragglers(config.straggler, workers) if s.worker == worker]
        self._random = random_stragglers(config.random_stragglers, worker, config.seed, workers)
        self._drawn: float = 0   # iterations the random straggles are drawn up to (inf: all drawn)
        self.device_time = config.device_time_model()

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
