"""SSP(s), stale synchronous parallel (Ho et al. 2013).

Worker i may start while c_i - c_min <= s. The gate reads the servers'
*applied* counts rather than the workers' clocks, so that the read which
follows sees every update of clocks <= c_i - s - 1 from every worker, and all
of the worker's own (PARADIGMS.md); applied <= pushed, so the logged
invariant on clocks holds a fortiori.
"""
from __future__ import annotations

import numpy as np

from .base import PASS, ClusterView, Gate, Paradigm


def bounded_gate(worker: int, view: ClusterView, s: int, *,
                 members: np.ndarray | None = None) -> Gate:
    """Pass iff every (member) worker j has had min(c_i - s, its final clock)
    pushes applied, and all of `worker`'s own (read-your-writes).
    In plain Python over lists: workers poll it while they wait, and for a
    few workers that is several times faster than numpy's per-call cost
    (benchmarks/control_plane.py); in numpy from VECTOR_FROM workers on
    (`mpips simulate` of hundreds: the loop was 30% of a run)."""
    if view.num_workers > VECTOR_FROM:
        return _bounded_gate_numpy(worker, view, s, members)
    clocks, applied, done = view.progress()
    c = clocks[worker]
    short = []
    for j, (a, cj, d) in enumerate(zip(applied, clocks, done)):
        # a done worker is needed only up to its final clock
        need = c if j == worker else min(c - s, cj) if d else c - s
        if a < need and (members is None or members[j]):
            short.append(j)
    return Gate(False, tuple(short)) if short else PASS


VECTOR_FROM = 32


def _bounded_gate_numpy(worker: int, view: ClusterView, s: int, members) -> Gate:
    clocks, applied, done = view.clocks, view.applied, view.done
    c = clocks[worker]
    need = np.where(done, np.minimum(c - s, clocks), c - s)
    need[worker] = c
    short = applied < need
    if members is not None:
        short &= np.asarray(members, dtype=bool)
    return Gate(False, tuple(np.flatnonzero(short).tolist())) if short.any() else PASS


class SSP(Paradigm):
    name = "ssp"

    def __init__(self, config, num_workers):
        super().__init__(config, num_workers)
        self.staleness = config.staleness

    def gate(self, worker, view):
        return bounded_gate(worker, view, self.staleness)
