"""BSP: every round all W workers read w_t and the servers apply the mean."""
from __future__ import annotations

import numpy as np

from .base import Paradigm
from .gates import bounded_gate


def round_complete(view, consumed: np.ndarray) -> bool:
    """Every worker still running has a push this server has not applied.
    In plain Python over lists: a server polls it while it waits."""
    clocks, _, done = view.progress()
    pending = False
    for c, k, d in zip(clocks, consumed.tolist(), done):
        if c > k:
            pending = True
        elif not (d and c == k):
            return False
    return pending


class BSP(Paradigm):
    name = "bsp"
    asynchronous = False

    def gate(self, worker, view):
        # Round c starts once every worker's push of round c-1 is applied.
        return bounded_gate(worker, view, 0)

    def server_ready(self, view, consumed):
        return round_complete(view, consumed)

    def synchronous(self, view):
        return True
