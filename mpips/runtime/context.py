"""What a role of a running job works with: the run's plan, its level of servers
(a store, a table, who is who), its services (log, clock, checkpoints), its paradigm."""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..config import Config
from ..io.log import RankLog
from ..io.rundir import RunDir
from ..paradigms import Paradigm
from ..training.batched import BatchedGradients
from .layout import Layout
from .recovery.checkpointer import Checkpoints
from .state import S, W
from .transport.protocols import ControlTable, LevelHandles, ParameterStore, unwatched
from .transport.wait import Clock


@dataclass(frozen=True)
class Plan:
    """The run, the same on every rank: settings, layout and length."""

    config: Config
    layout: Layout
    run: RunDir                  # its directory (run.h5, checkpoints), opened by the job
    iterations: int              # per worker (global budget: rounds of every worker's batch)
    iterations_per_epoch: float  # of one worker (global budget: N / samples of a round, not rounded)
    epochs: float                # the run's length in epochs (a cosine schedule's end)
    total_samples: int           # the global budget (budget.py); 0 under a per-worker one
    num_params: int
    sparse: bool                 # clients push top-k (a store then zeroes a slot once taken)
    reads: bool = False          # pushes carry the parameters they were computed on (async_rule dc*)
    loss_fn: Callable | None = None   # a user's loss(output, target) (mpips.train); None: cross-entropy
    training_samples: int = 0        # of the data set (a round larger than them cannot train: announce)
    hosts: tuple[str, ...] = ()      # each world rank's host, MPI's (the simulator's ranks have none)


@dataclass(frozen=True)
class Level:
    """One level of servers as a role sees it. GSSP's roles have two: the
    rows of a group's table are its workers, the global table's the group
    servers."""

    store: ParameterStore
    table: ControlTable
    client_ranks: tuple[int, ...]    # world ranks of the table's rows
    server_ranks: tuple[int, ...]    # world ranks of the servers that apply its pushes
    epoch_pushes: float              # pushes in the table per epoch
    clients: str = "worker"          # what writes the rows, in messages
    servers: str = "server"          # what applies the pushes, in messages
    watch_gate: Callable = unwatched   # a gate that did not pass, told to the transport (LevelHandles)

    @classmethod
    def of(cls, handles: LevelHandles, client_ranks: tuple[int, ...], server_ranks: tuple[int, ...],
           **more) -> "Level":
        return cls(handles.store, handles.table, client_ranks, server_ranks, watch_gate=handles.watch_gate, **more)


@dataclass
class Services:
    """One rank's: shared by its levels."""

    log: RankLog
    clock: Clock                     # wall time, or the simulator's virtual time (wait.py)
    checkpointer: Checkpoints
    budget_table: ControlTable       # whose CLAIMED cell counts the global budget's claims
    # the simulator's batched gradients (training/batched.py); None: each worker computes its own
    gradients: BatchedGradients | None = None


@dataclass
class Context:
    plan: Plan
    level: Level
    services: Services
    paradigm: Paradigm
    rank: int
    role: str
    index: int                       # within the role

    # the most read, by their names
    config = property(lambda self: self.plan.config)
    layout = property(lambda self: self.plan.layout)
    store = property(lambda self: self.level.store)
    table = property(lambda self: self.level.table)
    log = property(lambda self: self.services.log)
    clock = property(lambda self: self.services.clock)
    checkpointer = property(lambda self: self.services.checkpointer)

    def now(self) -> float:
        return self.services.clock.time() - self.services.clock.origin

    @functools.cached_property
    def name(self) -> str:
        return f"rank {self.rank} ({self.role} {self.index}){self._on(self.rank)}"

    def _on(self, rank: int) -> str:
        hosts = self.plan.hosts
        return f" on {hosts[rank]}" if len(set(hosts)) > 1 else ""

    def rank_name(self, rank: int) -> str:
        """'rank 4', with its host where the run has several: 'rank 4 on node3'
        (a stall across nodes names the node, a lost one's ranks)."""
        return f"rank {rank}{self._on(rank)}"

    def view(self, server: int = 0):
        """The paradigm's view of the table now, as `server` reads it (0 on a worker)."""
        return self.table.view(self.table.read(), self.now(), server)

    def wait(self, ready, *, what: str, describe, due=None, changed=None) -> float:
        log = self.log

        def ready_or_flush() -> bool:
            # a long wait leaves the rows logged before it on disk: a job that
            # ends in a stall (a node or its link lost) keeps them
            if ready():
                return True
            log.flush_if_due()
            return False

        return self.clock.wait_until(ready_or_flush, what=f"{self.name}: {what}", describe=describe,
                                     warn=self.config.stall_warn, timeout=self.config.stall_timeout,
                                     due=due, changed=changed)

    def epochs_of(self, pushes: int) -> float:
        return pushes / self.level.epoch_pushes

    def describe_workers(self, workers) -> str:
        """Whom a wait on `workers` waits for, for stall messages: a worker
        that has not pushed, 'worker 2 = rank 4 (clock 7)', or a server that
        has not applied pushes, 'server 0 = rank 0 (applied 5 of 6 pushes of
        worker 1)' (a stopped server holds up every gate)."""
        level, snap = self.level, self.table.read()
        rows = self.table.worker_rows(snap)
        applied = self.table.server_rows(snap)[:, len(S):]
        parts: list[str] = []
        lagging: dict[int, list[str]] = {}
        for j in workers:
            clock = int(rows[j, W.CLOCK])
            behind = [s for s in range(len(applied)) if applied[s, j] < clock]
            for s in behind:
                lagging.setdefault(s, []).append(f"{int(applied[s, j])} of {clock} pushes of "
                                                 f"{level.clients} {j}")
            if not behind:   # all its pushes applied: the worker itself is behind
                extra = ", done" if rows[j, W.DONE] else ""
                parts.append(f"{level.clients} {j} = {self.rank_name(level.client_ranks[j])} (clock {clock}{extra})")
        parts += [f"{level.servers} {s} = {self.rank_name(level.server_ranks[s])} (applied {', '.join(what)})"
                  for s, what in sorted(lagging.items())]
        return "; ".join(parts) if parts else "nothing (condition not met)"

    def wait_for_slot(self, row: int, pushed: int) -> float:
        """Before `row` (a client of `store`) pushes again: wait until every
        server has taken its `pushed` earlier pushes, so its gradient slot is
        free (mpi_transport.ParameterWindows). Gates that wait for a client's own
        pushes to be applied make this wait nothing."""
        table = self.table
        cells = [table.server_offset(s, len(S) + row) for s in range(table.servers)]

        def taken():
            return table.read_cells(cells)

        def describe():
            ranks = self.store.world_server_ranks
            counts = taken()
            return "; ".join(f"server {s} = {self.rank_name(ranks[s])} (took {int(counts[s])} of {pushed} pushes)"
                             for s in np.flatnonzero(counts < pushed))

        return self.wait(lambda: bool((taken() >= pushed).all()),
                         what=f"{self.level.clients} {row}'s gradient slot for push {pushed + 1}",
                         describe=describe)

    def wait_for_servers_done(self, stop=None) -> None:
        """Before the collective window frees: every server has finished.
        `stop` (a done worker's) takes a checkpoint asked for meanwhile."""
        table = self.table
        cells = [table.server_offset(s, S.DONE) for s in range(table.servers)]

        def ready():
            return all(table.read_cells(cells) > 0)

        def describe():
            rows = table.server_rows(table.read())
            return ", ".join(f"server {s} (pushes applied {int(rows[s, S.PUSHES])})"
                             for s in np.flatnonzero(rows[:, S.DONE] == 0))

        what = "waiting for the servers to finish"
        if stop is None:
            self.wait(ready, what=what, describe=describe)
        else:
            self.checkpointer.wait(self, ready, what=what, describe=describe, stop=stop)
