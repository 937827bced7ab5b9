"""BSP with backup workers (Chen et al. 2016, "Revisiting Distributed
Synchronous SGD"): a round is applied once its first W - b pushes are in;
the round's later pushes are dropped, and their workers go on with the next.

A push belongs to the round its worker read: the servers' steps when its gate
passed, published with the push (extras). A push of a round already applied
is dropped: consumed, so its worker's gate passes and it pulls the new
parameters, but never summed (the server logs a `dropped_push` event).

Server 0 decides which pushes make a round; the other servers apply, in the
round they are at, the pushes server 0 has counted once it is a step ahead
(each server picking the first W - b it sees could pick different ones).
A push is dropped once every server has applied its round, so no server
drops a push server 0 applied.

Scale: every push is g_i / (W - b), so a round of its first W - b pushes sums
to their mean. With a grace window (`grace_window` seconds), server 0 waits
that long after the (W - b)-th push of a round for more of it (the whole
window, unless every worker's push is in: the simulator wakes a waiting
server only on a write), then applies every push of the round in by then, k
of them, scaled (W - b) / k: again their mean. The last round of a global
budget may have fewer pushes (the workers that found no samples are done):
like BSP's, whose pushes are g_i / W, it is applied with what came, its step
smaller by the samples missing. b = 0 is BSP: the same gate, rounds and scale.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..settings import MAX_WORKERS, setting
from ..validate import ConfigError
from .base import Options, Push, Take
from .bsp import BSP
from .gates import own_writes_gate


@dataclass(frozen=True)
class BackupOptions(Options):
    backup_workers: int = setting(1, "b of the W workers are backups; a round is applied once its first "
                                     "W - b pushes are in, the rest dropped (0 = BSP)", low=0, high=MAX_WORKERS)
    grace_window: float = setting(0.0, "seconds the server waits, once a round's first W - b pushes are "
                                       "in, for more of that round (0 = none)", low=0.0, high=3600.0)

    def check_workers(self, workers: int) -> None:
        if self.backup_workers >= workers:
            raise ConfigError("backup_workers", self.backup_workers,
                              f"must be an integer in [0, {workers - 1}] (fewer than the {workers} workers)")


class Backup(BSP):
    name = "backup"
    Options = BackupOptions

    def __init__(self, config, num_workers: int):
        super().__init__(config, num_workers)
        self.backups = self.options.backup_workers
        self.quorum = num_workers - self.backups
        self.grace = self.options.grace_window
        self.rounds: dict[int, int] = {}   # worker -> the round its next push is for

    def gate(self, worker, view):
        if not self.backups:
            return super().gate(worker, view)
        # Only its own push must be in (applied or dropped): waiting for the
        # others' pushes is what backup workers save.
        gate = own_writes_gate(worker, view)
        if gate.ok:
            self.rounds[worker] = view.steps
        return gate

    def push(self, worker, view, **_):
        return Push(scale=1.0 / self.quorum)

    def extras(self, worker, clock):
        return (self.rounds.get(worker, 0),) if self.backups else ()

    def server_ready(self, view, consumed):
        if not self.backups:
            return super().server_ready(view, consumed)
        take = self.server_take(view, consumed)
        return bool(take.apply.any() or take.drop.any() or take.wait > 0)

    def server_take(self, view, consumed):
        if not self.backups:
            return None
        waiting = view.clocks > consumed
        rounds = view.extras[:, 0].astype(np.int64)
        # dropped once every server applied its round: until then a push of a
        # round server 0 applied waits (server 0 is never a round ahead)
        late = waiting & (rounds < view.steps)
        current = waiting & (rounds == view.server_steps[view.server])
        if view.server:
            return self._follow(view, late, current, rounds)
        apply = np.zeros_like(current)
        # every worker that could still push for this round has
        complete = (current | (view.done & ~waiting)).all()
        if current.sum() >= self.quorum:
            # the first W - b in: by push time, then worker
            arrived = sorted(np.flatnonzero(current), key=lambda j: (view.push_times[j, 0], j))
            remaining = view.push_times[arrived[self.quorum - 1], 0] + self.grace - view.now
            if remaining > 0 and not complete:
                return Take(apply=apply, drop=late, rounds=rounds, wait=remaining)
            if self.grace:
                apply = current   # every push of the round in by the window's end
            else:
                apply[arrived[:self.quorum]] = True
        elif current.any() and complete:
            apply = current   # the budget's end: no other worker will push for this round
        return Take(apply=apply, drop=late, rounds=rounds, scale=self._scale(apply))

    def _follow(self, view, late, current, rounds):
        """Another server applies the pushes server 0 applied in the round it
        is at: those server 0 counted once it is a step ahead (it drops none
        of them before this server has applied them)."""
        if view.server_steps[0] > view.server_steps[view.server]:
            apply = current & (view.server_applied[0] >= view.clocks)
        else:
            apply = np.zeros_like(current)
        return Take(apply=apply, drop=late, rounds=rounds, scale=self._scale(apply))

    def _scale(self, apply) -> float:
        """(W - b) / k for k > W - b pushes of a round (a grace window's): their mean."""
        k = int(apply.sum())
        return self.quorum / k if k > self.quorum else 1.0

    def state(self):
        return {"rounds": dict(self.rounds)}

    def load_state(self, state):
        self.rounds = {int(w): int(r) for w, r in state["rounds"].items()}
