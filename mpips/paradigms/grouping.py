"""GSSP grouping: which workers share a group server.

Workers of similar speed go together (docs/paradigms.md, GSSP): sort by iteration
time and cut into G groups, equal sizes by default or 1-D k-means on the
times. Groups are lists of worker indices (ascending), fastest group first.

Times within SAME_SPEED of each other count as equal, and equal times keep
worker order: a profile's noise (tens of microseconds on a 20 ms iteration
of equally fast workers under MPI) would otherwise decide which of them
share a group, differently in every run.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..settings import MAX_COUNT, MAX_WORKERS, setting
from ..validate import ConfigError
from .base import Options

GROUPINGS = ("equal", "kmeans")
SAME_SPEED = 0.05   # relative: times up to 5% above the fastest of their class are its equals


@dataclass(frozen=True)
class GroupOptions(Options):
    """The settings of a second level of servers, one per group of workers,
    which the runtime sets up and runs (mpips/runtime/job/levels.py) for a
    paradigm whose `group_servers` is not 0: its options are these, or a
    subclass (GSSP's)."""

    groups: int = setting(2, "number of worker groups", low=1, high=MAX_WORKERS)
    exchange_every: int = setting(0, "pushes between exchanges with the global servers; 0 = group size",
                                  low=0, high=MAX_COUNT)
    grouping: str = setting("equal", "how speeds are cut into groups", choices=GROUPINGS)
    group_assignment: str = setting("", "explicit groups, e.g. '0,1;2,3' (workers by index)")
    profile_iterations: int = setting(3, "iterations profiled before grouping", low=1, high=10_000)


def group_options(config) -> GroupOptions:
    """The options of `config`'s paradigm, which runs group servers: a GroupOptions."""
    if not isinstance(config.options, GroupOptions):
        raise ConfigError("paradigm", config.paradigm, "runs group servers, so its Options must be a "
                                                       "mpips.paradigms.grouping.GroupOptions")
    return config.options


def validate_layout(workers: int, groups: int) -> None:
    """G groups of W workers: 1 <= G <= W."""
    if not isinstance(workers, (int, np.integer)) or workers < 1:
        raise ConfigError("workers", workers, "must be an integer >= 1")
    if not isinstance(groups, (int, np.integer)) or groups < 1:
        raise ConfigError("groups", groups, "must be an integer >= 1")
    if groups > workers:
        raise ConfigError("groups", groups, f"must be <= workers ({workers})")


def group_by_speed(iter_times: Sequence[float] | np.ndarray, groups: int,
                   method: str = "equal") -> list[list[int]]:
    """Cut workers, sorted by iteration time, into `groups` groups, fastest first.

    equal:  sizes differ by at most one; the faster groups take the extra
            workers (like `numpy.array_split`).
    kmeans: 1-D k-means on the times, solved exactly by dynamic programming
            over the sorted times (optimal clusters in 1-D are contiguous), so
            there is no initialisation to choose, the result is deterministic,
            and every group is non-empty even with repeated times.
    Ties in time (within SAME_SPEED) keep worker order. Unknown times (nan)
    count as slowest.
    """
    t = np.asarray(iter_times, dtype=float).reshape(-1)
    validate_layout(int(t.size), groups)
    if method not in GROUPINGS:
        raise ConfigError("grouping", method, "allowed: " + ", ".join(GROUPINGS))
    key = same_speed(np.where(np.isnan(t), np.inf, t))
    order = np.argsort(key, kind="stable")
    if method == "equal":
        cuts = np.array_split(np.arange(t.size), groups)
        bounds = [(int(c[0]), int(c[-1]) + 1) for c in cuts]
    else:
        x = key[order]
        finite = np.isfinite(x)
        if not finite.all():
            # inf breaks the squared errors; put unknowns just past the slowest
            top = x[finite].max() if finite.any() else 1.0
            x = np.where(finite, x, 2 * abs(top) + 1.0)
        bounds = _kmeans_1d(x, groups)
    return [sorted(int(w) for w in order[a:b]) for a, b in bounds]


def same_speed(times: np.ndarray) -> np.ndarray:
    """Each time replaced by the fastest of its class: in ascending order, a
    class is a time and every later one within SAME_SPEED above it."""
    snapped = times.copy()
    first = None
    for w in np.argsort(times, kind="stable"):
        if first is None or not times[w] <= first * (1 + SAME_SPEED):
            first = times[w]
        snapped[w] = first
    return snapped


def _kmeans_1d(x: np.ndarray, k: int) -> list[tuple[int, int]]:
    """Optimal k-means of sorted x into k non-empty contiguous runs [a, b)."""
    n = x.size
    s1 = np.concatenate([[0.0], np.cumsum(x)])
    s2 = np.concatenate([[0.0], np.cumsum(x * x)])

    def sse(a, b):  # squared error of x[a:b]; a, b arrays or scalars
        m = b - a
        return s2[b] - s2[a] - (s1[b] - s1[a]) ** 2 / m

    inf = np.inf
    # cost[g, j]: best error of x[:j] in g+1 clusters; arg: start of the last one
    cost = np.full((k, n + 1), inf)
    arg = np.zeros((k, n + 1), dtype=int)
    j = np.arange(1, n + 1)
    cost[0, 1:] = sse(np.zeros_like(j), j)
    for g in range(1, k):
        for end in range(g + 1, n + 1):
            starts = np.arange(g, end)          # last cluster x[start:end], non-empty
            c = cost[g - 1, starts] + sse(starts, np.full_like(starts, end))
            best = int(np.argmin(c))            # first minimum: deterministic
            cost[g, end] = c[best]
            arg[g, end] = starts[best]
    bounds, end = [], n
    for g in range(k - 1, -1, -1):
        start = int(arg[g, end]) if g > 0 else 0
        bounds.append((start, end))
        end = start
    return bounds[::-1]


def parse_assignment(text: str, workers: int, groups: int) -> list[list[int]]:
    """Explicit groups from '0,1;2,3' (';' between groups, ',' between workers).

    Every worker 0..W-1 exactly once, exactly G non-empty groups. Groups are
    returned in the order written (their speed order is measured later).
    """
    validate_layout(workers, groups)

    def bad(why):
        return ConfigError("group_assignment", text,
                           f"{why}; expected {groups} ';'-separated groups of worker "
                           f"indices 0..{workers - 1}, each worker exactly once, e.g. '0,1;2,3'")

    parts = str(text).strip().split(";")
    if len(parts) != groups:
        raise bad(f"has {len(parts)} groups, groups={groups}")
    out: list[list[int]] = []
    seen: set[int] = set()
    for gi, part in enumerate(parts):
        items = [s.strip() for s in part.split(",")]
        if items == [""]:
            raise bad(f"group {gi} is empty")
        members = []
        for s in items:
            try:
                w = int(s)
            except ValueError:
                raise bad(f"{s!r} in group {gi} is not a worker index") from None
            if not 0 <= w < workers:
                raise bad(f"worker {w} does not exist")
            if w in seen:
                raise bad(f"worker {w} appears twice")
            seen.add(w)
            members.append(w)
        out.append(members)
    missing = sorted(set(range(workers)) - seen)
    if missing:
        raise bad("worker(s) " + ",".join(map(str, missing)) + " in no group")
    return out


def make_groups(config, workers: int, iter_times: Sequence[float] | np.ndarray | None = None) -> list[list[int]]:
    """The groups of a run: its `group_assignment` if given, else by measured speed."""
    options = group_options(config)
    if options.group_assignment:
        return parse_assignment(options.group_assignment, workers, options.groups)
    if iter_times is None:
        raise ValueError("iteration times are needed when group_assignment is not set")
    if len(iter_times) != workers:
        raise ValueError(f"{len(iter_times)} iteration times for {workers} workers")
    return group_by_speed(iter_times, options.groups, options.grouping)


class EpochTimeEMA:
    """Per-worker EMA of epoch time, `T <- 0.3*T + 0.7*T_new` (first value: T_new).

    Group speed is the mean of its members' T; workers not yet seen are left
    out of the mean (a group with none has no time yet: nan, ranked slowest).
    """

    def __init__(self, keep: float = 0.3):
        self.keep = float(keep)
        self.times: dict[int, float] = {}

    def update(self, worker: int, epoch_time: float) -> float:
        old = self.times.get(worker)
        new = float(epoch_time) if old is None else self.keep * old + (1 - self.keep) * float(epoch_time)
        self.times[worker] = new
        return new

    def group_time(self, members) -> float:
        seen = [self.times[w] for w in members if w in self.times]
        return float(np.mean(seen)) if seen else math.nan


class GroupSpeed:
    """A group's speed (docs/paradigms.md, GSSP): the mean over its members of an
    EMA of each member's epoch time, `T <- 0.3*T + 0.7*T_new` (EpochTimeEMA).

    Fed by the group server from its members' clocks and push times. Epoch
    times include the waits at gates: they measure what a group achieves.
    """

    def __init__(self, members: Sequence[int], iterations_per_epoch: int):
        self.members = [int(j) for j in members]
        self.ipe = max(1, int(iterations_per_epoch))   # a float under a global budget
        self.ema = EpochTimeEMA()
        self.epochs = dict.fromkeys(self.members, 0)    # epochs seen complete
        self.ends = dict.fromkeys(self.members, 0.0)    # time the last of them ended

    def observe(self, clocks: np.ndarray, push_times: np.ndarray) -> None:
        """Take the epochs completed since the last call (clocks and the
        (latest, previous) push times of every worker, indexed by worker)."""
        for j in self.members:
            epoch = int(clocks[j]) // self.ipe
            if epoch <= self.epochs[j]:
                continue
            # The push that ended the epoch is the latest one, or the previous
            # one when this is seen a push late; seen later still, the latest
            # push time is the estimate.
            late = int(clocks[j]) - epoch * self.ipe
            end = float(push_times[j, 1] if late == 1 else push_times[j, 0])
            self.ema.update(j, (end - self.ends[j]) / (epoch - self.epochs[j]))
            self.epochs[j], self.ends[j] = epoch, end

    def state(self) -> dict:
        return {"ema": dict(self.ema.times), "epochs": dict(self.epochs), "ends": dict(self.ends)}

    def load_state(self, state: dict) -> None:
        self.ema.times = {int(j): float(t) for j, t in state["ema"].items()}
        self.epochs = {int(j): int(e) for j, e in state["epochs"].items()}
        self.ends = {int(j): float(t) for j, t in state["ends"].items()}

    @property
    def time(self) -> float:
        """The group's epoch time (s), lower is faster; nan before any
        member has finished an epoch."""
        return self.ema.group_time(self.members)
