"""SSP(s), stale synchronous parallel (Ho et al. 2013).

Worker i may start while c_i - c_min <= s. The gate reads the servers'
*applied* counts rather than the workers' clocks, so that the read which
follows sees every update of clocks <= c_i - s - 1 from every worker, and all
of the worker's own (PARADIGMS.md); applied <= pushed, so the logged
invariant on clocks holds a fortiori.
"""
from __future__ import annotations

import numpy as np

from .base import ClusterView, Gate, Paradigm


def bounded_gate(worker: int, view: ClusterView, s: int, *, own: bool = True,
                 members: np.ndarray | None = None) -> Gate:
    """Pass iff every (member) worker j has had min(c_i - s, its final clock)
    pushes applied, and, with `own`, all of `worker`'s own pushes."""
    c = int(view.clocks[worker])
    need = np.full(view.num_workers, c - s, dtype=np.int64)
    need = np.where(view.done, np.minimum(need, view.clocks), need)
    if own:
        need[worker] = c
    short = view.applied < need
    if members is not None:
        short &= members
    if short.any():
        return Gate(False, tuple(int(j) for j in np.flatnonzero(short)))
    return Gate(True)


class SSP(Paradigm):
    name = "ssp"

    def __init__(self, config, num_workers):
        super().__init__(config, num_workers)
        self.staleness = config.staleness

    def gate(self, worker, view):
        return bounded_gate(worker, view, self.staleness)
