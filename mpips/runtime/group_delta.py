"""The update a GSSP group server owes the global servers (pure numpy).

A group server's copy of the parameters moves with every push it applies.
At an exchange it sends `delta = params - base`, its progress since the last
exchange (through the compressor's error feedback when there is one), and
then continues either from the global parameters, when they already hold
everything this group sent before, plus what they do not hold yet (this
payload and the compressor's residual), or from its own copy. Either way the
next delta is measured from the new base, so no progress is sent twice or
lost; which one only decides how fresh the group's copy is.
"""
from __future__ import annotations

import numpy as np

from ..paradigms.compress import Compressor, SparseGrad, dense_of


class GroupDelta:
    """`params` is the group's copy, changed in place by its optimizer."""

    def __init__(self, params: np.ndarray, compressor: Compressor):
        self.params = params
        self.base = params.copy()
        self.compressor = compressor
        self._delta = np.empty_like(params)
        self._next = np.empty_like(params)
        self._payload: SparseGrad | np.ndarray | None = None

    def take(self, *, flush: bool = False) -> SparseGrad | np.ndarray:
        """What to send now; `flush` sends the compressor's whole residual too
        (dense), as at every epoch end and at the last exchange."""
        np.subtract(self.params, self.base, out=self._delta)
        payload = self.compressor.compress(self._delta)
        if flush and self.compressor.sparse:   # (a dense one holds nothing back)
            payload = dense_of(payload) + self.compressor.flush()
        self._payload = payload
        return payload

    def rebase(self, pulled: np.ndarray | None = None) -> None:
        """After sending `take()`'s payload: continue from `pulled` (global
        parameters holding every earlier payload) plus that payload and the
        residual, or, with None, from the group's own copy."""
        if pulled is not None:
            nxt = self._next
            np.copyto(nxt, pulled)
            if isinstance(self._payload, SparseGrad):
                self._payload.add_to(nxt)
            else:
                nxt += self._payload
            if self.compressor.sparse:
                nxt += self.compressor.residual
            np.copyto(self.params, nxt)  # one copy: readers of params see fewer torn states
        np.copyto(self.base, self.params)
        self._payload = None
