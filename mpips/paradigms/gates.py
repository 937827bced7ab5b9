"""The gates paradigms share: "may worker i start its next iteration?".

Every gate also keeps read-your-writes (docs/paradigms.md): a worker starts only
once every server has applied all of its own pushes.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .view import ClusterView


@dataclass(frozen=True)
class Gate:
    """Answer to "may worker i start its next iteration?"."""

    ok: bool
    # Workers it waits for, when not ok, in ascending order: it cannot pass before
    # each of them has more pushes applied or is done (`mpips simulate` re-checks it only then).
    waiting_for: tuple[int, ...] = ()
    event: dict[str, Any] | None = None        # something to log (e.g. DSSP r*)
    # The one of `waiting_for` furthest behind (fewest pushes applied, then the
    # lowest clock, then the first), where the gate has it at hand (-1: not
    # given): the one `mpips simulate` waits for (local_transport.LocalControlTable.gate_answered).
    behind: int = -1


PASS = Gate(True)   # the common answer, made once: gates are polled


def own_writes_gate(worker: int, view: ClusterView) -> Gate:
    """Read-your-writes (docs/paradigms.md, ASP): pass once every server has
    applied all of `worker`'s own pushes, so the pull that follows reflects
    them, as in every parameter server that serves a worker's requests in
    order. Without it, a worker pulls right after its push, before it is
    applied, and computes on parameters missing its own last update (one
    worker under ASP then ended at 71% where sequential SGD reaches 95.5%)."""
    return PASS if view.applied_to(worker) >= view.clock(worker) else Gate(False, (worker,))


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
    if not short.any():
        return PASS
    # `behind` from the arrays at hand: the simulator would otherwise make
    # them again from the tuple (10 us a check at 256 workers)
    return Gate(False, tuple(np.flatnonzero(short).tolist()), behind=furthest_behind(applied, clocks, short))


def furthest_behind(applied: np.ndarray, clocks: np.ndarray, among: np.ndarray) -> int:
    """The worker of `among` (a mask) furthest behind: the fewest pushes
    applied, then the lowest clock, then the lowest index."""
    key = applied << 32   # (pushes applied and clocks: counts far below 2**31)
    key += clocks
    key[~among] = np.iinfo(np.int64).max
    return int(key.argmin())
