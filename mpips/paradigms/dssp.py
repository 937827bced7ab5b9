"""DSSP, dynamic stale synchronous parallel (Zhao et al., ICDCS 2019).

The user gives a staleness range [s_L, s_H]. A worker within s_L of the
slowest goes on as under SSP(s_L). The fastest worker, once beyond s_L, asks
the controller how many extra iterations r* (at most r_max = s_H - s_L) bring
its next push closest in time to a push of the slowest worker, so that its
wait, when it comes, is shortest; it then runs on r* credits.

Choices where docs/paradigms.md leaves room, each tested in tests/unit/test_dssp.py:
- The decision is made once per push (the first gate poll at a clock) and
  cached: later polls at the same clock only wait for the bound chosen then,
  so a credit is consumed and the controller called once per clock.
- A pass on a credit gates on SSP(s_H) rather than not at all: credits granted
  again after the last ones ran out could otherwise carry the worker beyond
  s_H, and "effective staleness never exceeds s_H" is the paradigm's promise.
  Every bound is applied with `bounded_gate`, on the servers' applied counts,
  so reads also see all of the worker's own pushes.
- "Fastest" = every active worker at the highest clock (equally fast workers
  are treated alike; a lowest-index tie-break would deny worker 1 the credits
  worker 0 gets); "slowest" = the active worker at the lowest clock, ties to
  the lowest index.
- A worker with fewer than two pushes has no interval; the controller then
  predicts nothing and answers r* = 0 (wait, as SSP(s_L) would).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from ..settings import setting
from ..validate import ConfigError
from .base import Options, Paradigm
from .gates import Gate, bounded_gate
from .view import ClusterView


def push_interval(push_times: np.ndarray) -> float:
    """A_i[0] - A_i[1] from a worker's (latest, previous) push times; nan with
    fewer than two pushes."""
    latest, previous = push_times
    return float(latest - previous)


def closest_meeting(first_f: float, interval_f: float, first_s: float, interval_s: float,
                    r_max: int) -> int:
    """r* = argmin_k min_j |F_k - S_j| over k, j in 0..r_max, with
    F_k = first_f + k*interval_f and S_j = first_s + j*interval_s.

    Both lists ascend, so one pass with a pointer j into S (the last S_j at or
    before F_k, which only moves forward) finds each F_k's nearest S_j.
    Ties go to the smaller k: fewer extra iterations, less staleness.
    0 when an interval is unknown (nan) or negative: nothing to predict.
    """
    if not (interval_f >= 0 and interval_s >= 0):
        return 0
    best_k, best_d = 0, math.inf
    j = 0
    for k in range(r_max + 1):
        f = first_f + k * interval_f
        while j < r_max and first_s + (j + 1) * interval_s <= f:
            j += 1
        d = abs(f - (first_s + j * interval_s))
        if j < r_max:
            d = min(d, abs(first_s + (j + 1) * interval_s - f))
        if d < best_d:
            best_k, best_d = k, d
    return best_k


MAX_RANGE = 10_000   # s_H: the controller looks at r_max + 1 predicted pushes on every call


@dataclass(frozen=True)
class DSSPOptions(Options):
    staleness_low: int = setting(3, "the lower bound s_L", low=0, high=MAX_RANGE)
    staleness_high: int = setting(15, "the upper bound s_H", low=0, high=MAX_RANGE)

    def check(self) -> None:
        if self.staleness_high < self.staleness_low:
            raise ConfigError("staleness_high", self.staleness_high,
                              f"must be >= staleness_low ({self.staleness_low})")


class DSSP(Paradigm):
    name = "dssp"
    Options = DSSPOptions

    def __init__(self, config, num_workers):
        super().__init__(config, num_workers)
        self.low = self.options.staleness_low
        self.high = self.options.staleness_high
        self.r_max = self.high - self.low
        self.credits = np.zeros(num_workers, dtype=np.int64)   # r_i
        # worker -> (clock, bound, event) of the decision made at that clock
        self._decided: dict[int, tuple[int, int, dict | None]] = {}

    def gate(self, worker: int, view: ClusterView) -> Gate:
        clock = view.clock(worker)
        decided = self._decided.get(worker)
        if decided is None or decided[0] != clock:
            decided = (clock, *self._decide(worker, view))
            self._decided[worker] = decided
        _, bound, event = decided
        gate = bounded_gate(worker, view, bound)
        if not event:
            return gate
        # a fresh dict each time: the worker pops "kind" from the one it logs
        return dataclasses.replace(gate, event=dict(event))

    def _decide(self, worker: int, view: ClusterView) -> tuple[int, dict | None]:
        """The staleness bound this worker gates on at its current clock
        (s_H when it runs on a credit, else s_L), and the controller event."""
        if self.credits[worker] > 0:
            self.credits[worker] -= 1
            return self.high, None
        active = ~view.done
        c = view.clock(worker)
        if c - view.c_min() <= self.low:
            return self.low, None
        if c < int(view.clocks[active].max()):
            return self.low, None
        r, event = self.controller(worker, view)
        if r > 0:
            self.credits[worker] = r - 1
            return self.high, event
        return self.low, event

    def controller(self, fastest: int, view: ClusterView) -> tuple[int, dict]:
        """r* for `fastest` against the slowest active worker, and its log event."""
        active = np.flatnonzero(~view.done)
        slowest = int(active[np.argmin(view.clocks[active])])
        a_f, a_s = view.push_times[fastest], view.push_times[slowest]
        i_f, i_s = push_interval(a_f), push_interval(a_s)
        r = closest_meeting(float(a_f[0]), i_f, float(a_s[0]), i_s, self.r_max)
        return r, {"kind": "dssp_controller", "call_time": view.now, "fastest": fastest,
                   "slowest": slowest, "interval_fast": i_f, "interval_slow": i_s,
                   "r_star": r, "r_max": self.r_max,
                   "gap": int(view.clocks[fastest]) - view.c_min()}

    def extras(self, worker: int, clock: int) -> tuple[float, ...]:
        return (float(self.credits[worker]),)

    def state(self):
        # with the decisions: a checkpoint taken while a worker waits at a gate
        # must not make it decide (spend a credit, ask the controller) again
        return {"credits": self.credits.tolist(),
                "decided": [[w, *d] for w, d in self._decided.items()]}

    def load_state(self, state):
        self.credits[:] = state["credits"]
        self._decided = {int(w): (int(c), int(b), e) for w, c, b, e in state.get("decided", [])}
