"""LB-BSP batch allocation: split a fixed global batch X by predicted speed.

`allocate` gives each worker a share proportional to its predicted speed
(linear time model), so all finish a round together; given each worker's
fixed seconds a round (its pull and push, which no batch size changes), the
shares that make compute plus those seconds end together; `BatchRefiner` corrects
that split from measured finish times when time is not linear in batch size
(GPU-style). Both keep the sum exactly X and every batch in [1, cap].
Pure numpy: no MPI, no torch.
"""
from __future__ import annotations

import math
from bisect import bisect_left

import numpy as np
from numpy.typing import ArrayLike

from ..validate import ConfigError

__all__ = ["allocate", "BatchRefiner"]


def _known(values: ArrayLike, valid, none_known: float) -> np.ndarray:
    """`values` with unknown entries (not finite, or not `valid`) replaced by
    the mean of the known ones, so a worker without a measurement yet counts
    as an average one, not as none or everything; all `none_known` when no
    entry is known."""
    x = np.asarray(values, dtype=float).reshape(-1)
    known = np.isfinite(x) & valid(x)
    if not known.any():
        return np.full_like(x, none_known)
    return np.where(known, x, x[known].mean())


def _bounded_shares(total: int, v: np.ndarray, lo: float, hi: float,
                    fixed: np.ndarray | None = None) -> np.ndarray:
    """Real shares clip(v_i (lam - t_i), lo, hi) summing to `total`
    (water-filling); t_i: `fixed`, 0 where not given. lam is then the round's
    time, t_i + x_i / v_i for every worker within its bounds.

    f(lam) = sum_i clip(v_i (lam - t_i), lo, hi) is non-decreasing and piecewise
    linear with breakpoints at t_i + lo/v_i and t_i + hi/v_i; find the segment
    where it crosses `total` and solve on it. What a cap cuts off thus goes to
    the unclipped workers in proportion to their speeds (and the floor of 1 is
    paid by them in the same proportion).
    """
    t = np.zeros_like(v) if fixed is None else fixed
    bps = np.unique(np.concatenate([t + lo / v, t + hi / v]))

    def f(k: int) -> float:
        x = (bps[k] - t) * v
        np.maximum(x, lo, out=x)   # np.clip, without its dispatch (microseconds a call)
        np.minimum(x, hi, out=x)
        return x.sum()

    # first breakpoint with f >= total, by bisection: f at O(log W) breakpoints,
    # O(W) each (f at all 2W of them is a 2W x W matrix: 128K cells a round at
    # 256 workers, in every worker)
    k = bisect_left(range(len(bps)), float(total), key=f)
    if k == 0:
        lam = bps[0]
    elif k == len(bps):                      # unreachable when total <= hi*W
        lam = bps[-1]
    else:
        l0, l1, f0, f1 = bps[k - 1], bps[k], f(k - 1), f(k)
        lam = l0 + (total - f0) * (l1 - l0) / (f1 - f0)
    return np.clip((lam - t) * v, lo, hi)


def _round_to_sum(real: np.ndarray, total: int, lo: int, hi: int) -> np.ndarray:
    """Largest-remainder rounding of `real` (already within [lo, hi], summing to
    `total` up to float error) to integers that sum exactly to `total`."""
    x = np.floor(real + 1e-9).astype(np.int64)   # 2.9999999999 is 3, not 2
    x = np.clip(x, lo, hi)
    rem = real - x
    deficit = total - int(x.sum())
    # Stable sort so ties go to the lower worker index: deterministic. Each
    # worker moves by at most one, the largest remainders first (the smallest
    # when taking away), skipping those at their bound.
    if deficit > 0:
        order = np.argsort(-rem, kind="stable")
        x[order[x[order] < hi][:deficit]] += 1
    elif deficit < 0:
        order = np.argsort(rem, kind="stable")
        x[order[x[order] > lo][:-deficit]] -= 1
    return x


def allocate(total: int, speeds: ArrayLike, cap: int = 0, fixed: ArrayLike | None = None) -> np.ndarray:
    """Per-worker batch sizes x_i ~ X * v_i / sum_j v_j, summing exactly to X.

    `total` is the global batch X, `speeds` the predicted samples/s per worker
    (<= 0 or NaN = unknown: such a worker is given the mean of the known
    speeds; all unknown = equal split), `cap` the largest batch of one worker
    (0 = none). Every x_i is >= 1 and <= cap. Without a binding bound,
    |x_i - X v_i / sum v| < 1 (largest-remainder rounding).

    `fixed`: each worker's seconds a round that do not grow with its batch
    (pull and push; unknown entries as the mean of the known ones, all
    unknown as 0). Then x_i ~ v_i (T - t_i), T = (X + sum_j v_j t_j) / sum_j v_j,
    so that t_i + x_i / v_i is T for every worker within its bounds: a worker
    behind a slower link computes on fewer samples.

    Raises ConfigError('global_batch', ...) when X < W or X > cap * W.
    """
    v = _known(speeds, lambda x: x > 0, 1.0)   # all unknown: an equal split
    w = len(v)
    if w == 0:
        raise ValueError("allocate() needs at least one worker")
    if isinstance(total, bool) or int(total) != total:
        raise ConfigError("global_batch", total, "must be an integer")
    total = int(total)
    cap = int(cap)
    if cap < 0:
        raise ConfigError("batch_cap", cap, "must be an integer >= 0 (0 = no cap)")
    if total < w:
        raise ConfigError("global_batch", total,
                          f"must be >= the number of workers ({w}): every worker needs "
                          "at least one sample per round")
    if cap > 0 and total > cap * w:
        raise ConfigError("global_batch", total,
                          f"must be <= batch_cap x workers ({cap} x {w} = {cap * w})")
    hi = cap if cap > 0 else total
    t = None if fixed is None else _known(fixed, lambda x: x >= 0, 0.0)
    if t is not None and len(t) != w:
        raise ValueError(f"{w} speeds but {len(t)} fixed times")
    real = _bounded_shares(total, v, 1.0, float(hi), t)
    return _round_to_sum(real, total, 1, hi)


class BatchRefiner:
    """Refines batch sizes from measured finish times (nonlinear time models).

    Each call to `update` moves `step` samples from the slowest worker to the
    fastest one that can take them; whenever a worker's direction reverses
    (it gave last time it moved and now receives, or the other way round) the
    step is halved first, since a reversal means the last move overshot. This
    is a per-pair bisection: it needs no model of time versus batch size.

    Finish times agree when (max - min) / max <= epsilon (relative to the
    slowest worker, i.e. the round time); then batches are left as they are.
    The step never grows again. A reversal at a step of 1 sample means epsilon
    is finer than one sample can buy: the refiner then returns the best split
    it has measured since `reset()`, sets `settled` and stops moving instead of
    oscillating between two neighbouring splits. Call
    `reset()` after a change in the cluster (e.g. a new allocation from the
    predictor) to restart the search with the initial step.

    `initial_step` defaults to max(1, X // (4 W)), a quarter of an even share.
    """

    def __init__(self, total: int, *, epsilon: float = 0.05,
                 initial_step: int | None = None, cap: int = 0):
        if not (math.isfinite(epsilon) and epsilon >= 0):
            raise ValueError(f"epsilon must be a finite number >= 0, got {epsilon!r}")
        if initial_step is not None and initial_step < 1:
            raise ValueError(f"initial_step must be >= 1, got {initial_step!r}")
        self.total = int(total)
        self.epsilon = float(epsilon)
        self.initial_step = initial_step
        self.cap = int(cap)
        self.reset()

    def reset(self) -> None:
        """Forget the step and the directions (start a new search)."""
        self.step: int | None = self.initial_step
        self.directions: np.ndarray | None = None   # last move per worker: -1 gave, +1 took, 0 never
        self.converged = False    # the last round's times agreed within epsilon
        self.settled = False      # the search ran out of step; no moves until reset()
        self.rounds = 0
        self._best: tuple[float, np.ndarray] | None = None   # (spread, batches) since reset

    def state(self) -> dict:
        """The search in progress, for a checkpoint."""
        return {"step": self.step, "directions": self.directions, "converged": self.converged,
                "settled": self.settled, "rounds": self.rounds,
                "best": None if self._best is None else list(self._best)}

    def load_state(self, state: dict) -> None:
        self.step = state["step"]
        d = state["directions"]
        self.directions = None if d is None else np.asarray(d, dtype=np.int8)
        self.converged, self.settled = bool(state["converged"]), bool(state["settled"])
        self.rounds = int(state["rounds"])
        b = state["best"]
        self._best = None if b is None else (float(b[0]), np.asarray(b[1], dtype=np.int64))

    def spread(self, finish_times: ArrayLike) -> float:
        """(max - min) / max of the finish times: 0 = perfectly balanced."""
        t = np.asarray(finish_times, dtype=float)
        tmax = t.max()
        return float((tmax - t.min()) / tmax) if tmax > 0 else 0.0

    def update(self, batches: ArrayLike, finish_times: ArrayLike) -> np.ndarray:
        """Batch sizes for the next round, given this round's and its finish times."""
        x = np.asarray(batches, dtype=np.int64).copy()
        t = np.asarray(finish_times, dtype=float)
        w = len(x)
        if len(t) != w:
            raise ValueError(f"{w} batches but {len(t)} finish times")
        if int(x.sum()) != self.total:
            raise ValueError(f"batches sum to {int(x.sum())}, not the global batch {self.total}")
        if self.directions is None or len(self.directions) != w:
            self.directions = np.zeros(w, dtype=np.int8)
        if self.step is None:
            self.step = max(1, self.total // (4 * w))
        self.rounds += 1
        # A round with a missing or nonsensical time teaches nothing: keep the split.
        if w < 2 or not np.all(np.isfinite(t)) or np.any(t < 0):
            return x
        if self.settled:
            return x
        spread = self.spread(t)
        if self._best is None or spread < self._best[0]:
            self._best = (spread, x.copy())
        self.converged = spread <= self.epsilon
        if self.converged:
            return x
        hi = self.cap if self.cap > 0 else self.total
        slow = int(np.argmax(t))
        if x[slow] <= 1:
            return x                         # slowest has nothing left to give
        takers = [i for i in np.argsort(t, kind="stable") if i != slow and x[i] < hi]
        if not takers:
            return x                         # everyone else is at the cap
        fast = int(takers[0])
        if self.directions[slow] == +1 or self.directions[fast] == -1:
            if self.step == 1:
                # Overshot by one sample: epsilon is finer than one sample can
                # buy. Stop at the best split measured rather than oscillate
                # between two neighbours.
                self.settled = True
                return self._best[1].copy()
            self.step //= 2
        amount = min(self.step, int(x[slow]) - 1, hi - int(x[fast]))
        x[slow] -= amount
        x[fast] += amount
        self.directions[slow] = -1
        self.directions[fast] = +1
        return x
