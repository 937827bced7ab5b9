"""The settings that make a homogeneous machine act like a mixed cluster
(`--slowdown`, `--straggler`, `--random-stragglers`, `--device-time`), their
one parser: the configuration parses them once (`Config.cluster`), the
emulation (mpips/training/emulation.py), the profiles and the analysis read
what it made. Torch-free, so that the configuration imports no training code.

Every number is bounded, so an accepted value runs: a worker count, a factor
or a time beyond these limits is refused in one line, and the parsers check
the syntax without building per-worker lists (`1x100000000000` is one run of
a count, refused by its size, not a list built to be counted).
"""
from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from typing import NamedTuple

from .settings import MAX_WORKERS
from .validate import ConfigError

MAX_FACTOR = 10_000.0       # the most an iteration may be slowed, all factors multiplied
MAX_SECONDS = 3600.0        # a modelled device time's a and c, and its time at the batch size
MAX_EXPONENT = 3.0          # a device time's p: a + c*b**p stays finite at any batch
MAX_ITERATION = 10**12      # a straggle's start and length


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


class RandomStraggler(NamedTuple):
    """A worker's random straggles: each iteration not already slowed starts
    one with probability `rate`, lasting a geometric number of iterations of
    mean `mean`, slowed by `factor`."""

    rate: float
    mean: float
    factor: float


_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6}
_DEVICE_TIME_HELP = (f"a duration with its unit (s, ms or us) such as 20ms (at batch-size, linear in "
                     f"the batch), or a=2ms,c=1ms,p=0.8 for a + c*b**p seconds (a, c in [0, "
                     f"{MAX_SECONDS:g}] seconds, p in (0, {MAX_EXPONENT:g}], at most {MAX_SECONDS:g} "
                     f"seconds at batch-size)")


def _duration(text: str) -> float:
    m = re.fullmatch(r"\s*([0-9.eE+-]+)\s*(s|ms|us)?\s*", text)
    if not m:
        raise ValueError(text)
    if m.group(2) is None and float(m.group(1)) != 0:
        # every example says 20ms: a bare 20 would be 20 s an iteration, silently
        raise ValueError(text)
    value = float(m.group(1)) * _UNITS[m.group(2) or "s"]
    if not 0 <= value <= MAX_SECONDS:
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
        if not 0 < p <= MAX_EXPONENT:
            raise ValueError(text)
        model = DeviceTime(_duration(parts.get("a", "0")), _duration(parts.get("c", "0")), p)
        if not 0 < model.seconds(batch_size) <= MAX_SECONDS or model.seconds(1) <= 0:
            raise ValueError(text)
        return model
    except (ValueError, OverflowError):
        raise ConfigError("device_time", text, _DEVICE_TIME_HELP) from None


_SLOWDOWN_FORMS = (f"factors in [1, {MAX_FACTOR:g}], one factor per worker, worker 0 first: '1,1,2,4', "
                   f"or FACTORxCOUNT items (COUNT >= 1, at most {MAX_WORKERS} workers in all) among "
                   f"them, e.g. '1x6,4x2'")


@dataclass(frozen=True)
class Slowdowns:
    """Persistent slowdown factors as runs of (factor, count), worker 0 first."""

    runs: tuple[tuple[float, int], ...] = ()
    text: str = ""

    @property
    def workers(self) -> int:
        return sum(n for _, n in self.runs)

    def highest(self) -> float:
        return max((f for f, _ in self.runs), default=1.0)

    def factors(self, workers: int | None = None) -> list[float]:
        """One factor per worker ([] for none); `workers` given: checked to be their number."""
        if workers is not None and self.runs and self.workers != workers:
            raise ConfigError("slowdown", self.text, f"{self.workers} factors for {workers} workers; "
                                                     f"give {_SLOWDOWN_FORMS}")
        return [f for f, n in self.runs for _ in range(n)]


def parse_slowdowns(text: str) -> Slowdowns:
    """'1,1,2,4' or FACTORxCOUNT items mixed with plain factors ('1x48,2x12,4x4':
    48 workers at 1, then 12 at 2, then 4 at 4), as runs."""
    runs: list[tuple[float, int]] = []
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
        if not 1 <= f <= MAX_FACTOR or n < 1:
            raise ConfigError("slowdown", text, f"{item!r}: {_SLOWDOWN_FORMS}")
        runs.append((f, n))
        if sum(n for _, n in runs) > MAX_WORKERS:
            raise ConfigError("slowdown", text, f"more than {MAX_WORKERS} workers; {_SLOWDOWN_FORMS}")
    return Slowdowns(tuple(runs), text)


def parse_slowdown(text: str, workers: int | None = None) -> list[float]:
    """One factor per worker ([] for ''); `workers` None: as many as the text names."""
    return parse_slowdowns(text).factors(workers)


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


def parse_stragglers(text: str, workers: int | None = None) -> list[Straggle]:
    """'worker:start_iter:iters:factor[,...]' -> explicit transient stragglers
    (workers None: the syntax only, before the number of workers is known)."""
    out = []
    top = MAX_WORKERS if workers is None else workers
    for item in filter(None, (s.strip() for s in text.split(","))):
        parts = item.split(":")
        try:
            w, start, length, factor = int(parts[0]), int(parts[1]), int(parts[2]), float(parts[3])
            if len(parts) != 4:
                raise ValueError
        except (ValueError, IndexError):
            raise ConfigError("straggler", text,
                              "entries worker:start_iter:iters:factor, e.g. 3:20:30:4") from None
        if (not 0 <= w < top or not 0 <= start <= MAX_ITERATION or not 1 <= length <= MAX_ITERATION
                or not 1 <= factor <= MAX_FACTOR):
            raise ConfigError("straggler", item,
                              f"worker in 0..{top - 1}, start in [0, {MAX_ITERATION:.0e}], iters in "
                              f"[1, {MAX_ITERATION:.0e}], factor in [1, {MAX_FACTOR:g}] (finite)")
        out.append(Straggle(w, start, length, factor))
    return out


def worst_overlap(straggles: list[Straggle]) -> float:
    """The largest product of the factors of straggles of one worker that cover one iteration."""
    worst = 1.0
    for _, group in itertools.groupby(sorted(straggles, key=lambda s: s.worker), key=lambda s: s.worker):
        mine = list(group)
        # a sweep over starts and ends, ends first at one iteration: [start, start + length)
        events = sorted([(s.start, 1, s.factor) for s in mine] + [(s.start + s.length, 0, s.factor)
                                                                   for s in mine])
        product, covering = 1.0, 0
        for _, starts, factor in events:
            covering += 1 if starts else -1
            product = product * factor if starts else (product / factor if covering else 1.0)
            worst = max(worst, product)
    return worst


_RANDOM_FORMS = ("rate:mean_iters:factor, e.g. 0.01:20:4, for every worker, or one per worker "
                 "separated by commas")


def parse_random_stragglers(text: str, workers: int | None = None) -> list[RandomStraggler]:
    """'rate:mean_iters:factor' -> [one] (every worker's); 'r:m:f,r:m:f,...'
    -> one per worker (a measured cluster's, mpips/experiments/profile.py);
    '' -> []. `workers` None: the syntax only."""
    out = []
    for item in (s.strip() for s in text.split(",")) if text else ():
        try:
            rate, mean, factor = (float(x) for x in item.split(":"))
        except ValueError:
            raise ConfigError("random_stragglers", text, _RANDOM_FORMS) from None
        # finite: an infinite mean or factor would stall a worker for ever
        if not (0 <= rate <= 1 and 1 <= mean <= MAX_ITERATION and 1 <= factor <= MAX_FACTOR):
            raise ConfigError("random_stragglers", text,
                              f"{item!r}: rate in [0,1], mean_iters in [1, {MAX_ITERATION:.0e}], "
                              f"factor in [1, {MAX_FACTOR:g}] (finite)")
        out.append(RandomStraggler(rate, mean, factor))
        if len(out) > MAX_WORKERS:
            raise ConfigError("random_stragglers", text, f"more than {MAX_WORKERS} items; {_RANDOM_FORMS}")
    if workers is not None and len(out) > 1 and len(out) != workers:
        raise ConfigError("random_stragglers", text, f"{len(out)} items for {workers} workers; give "
                                                     f"{_RANDOM_FORMS}")
    return out


@dataclass(frozen=True)
class EmulatedCluster:
    """The four settings parsed: persistent slowdowns, explicit and random
    stragglers, the device-time model (None: the measured compute, scaled)."""

    slowdowns: Slowdowns
    stragglers: tuple[Straggle, ...]
    random: tuple[RandomStraggler, ...]
    device_time: DeviceTime | None
    straggler_text: str = ""
    random_text: str = ""

    @classmethod
    def parse(cls, *, slowdown: str, straggler: str, random_stragglers: str, device_time: str,
              batch_size: int) -> "EmulatedCluster":
        cluster = cls(parse_slowdowns(slowdown), tuple(parse_stragglers(straggler)),
                      tuple(parse_random_stragglers(random_stragglers)),
                      parse_device_time(device_time, batch_size), straggler, random_stragglers)
        worst = (cluster.slowdowns.highest() * worst_overlap(list(cluster.stragglers))
                 * max((r.factor for r in cluster.random), default=1.0))
        if not worst <= MAX_FACTOR:
            # factors that multiply to more than this make times no table or clock should hold
            name, text = ("straggler", straggler) if straggler else ("random_stragglers", random_stragglers)
            raise ConfigError(name, text, f"slows an iteration {worst:.3g}x with the slowdown and the "
                                          f"other stragglers; at most {MAX_FACTOR:g}x in all")
        return cluster

    def check_workers(self, workers: int) -> None:
        """Each setting that names workers, against their number."""
        self.slowdowns.factors(workers)
        for s in self.stragglers:
            if s.worker >= workers:
                raise ConfigError("straggler", self.straggler_text,
                                  f"worker in 0..{workers - 1} (the {workers} workers), not {s.worker}")
        if len(self.random) > 1 and len(self.random) != workers:
            raise ConfigError("random_stragglers", self.random_text,
                              f"{len(self.random)} items for {workers} workers; give {_RANDOM_FORMS}")

    def random_of(self, worker: int) -> RandomStraggler | None:
        """`worker`'s random stragglers (None: none)."""
        if not self.random:
            return None
        return self.random[worker] if len(self.random) > 1 else self.random[0]
