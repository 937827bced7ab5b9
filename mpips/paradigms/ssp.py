"""SSP(s), stale synchronous parallel (Ho et al. 2013).

Worker i may start while c_i - c_min <= s. The gate reads the servers'
*applied* counts rather than the workers' clocks, so that the read which
follows sees every update of clocks <= c_i - s - 1 from every worker, and all
of the worker's own (docs/paradigms.md); applied <= pushed, so the logged
invariant on clocks holds a fortiori.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..settings import MAX_STALENESS, setting
from .base import Options, Paradigm
from .gates import bounded_gate


@dataclass(frozen=True)
class SSPOptions(Options):
    staleness: int = setting(3, "the bound s: c_i - c_min <= s", low=0, high=MAX_STALENESS)


class SSP(Paradigm):
    name = "ssp"
    Options = SSPOptions

    def __init__(self, config, num_workers):
        super().__init__(config, num_workers)
        self.staleness = self.options.staleness

    def gate(self, worker, view):
        return bounded_gate(worker, view, self.staleness)
