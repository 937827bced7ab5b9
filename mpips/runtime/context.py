"""What every role of a running job shares: configuration, layout, windows, log, time."""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..config import Config
from ..io.log import RankLog, set_status
from ..paradigms import Paradigm
from .clock import WALL, Clock
from .layout import Layout
from .rendezvous import SetupTimeout, allgather_within
from .state import S, W


@dataclass
class Context:
    config: Config
    layout: Layout
    comm: Any                    # COMM_WORLD (None in the simulator: no collectives)
    role_comm: Any               # this rank's role
    rank: int
    role: str
    index: int                   # index within the role
    run_dir: str
    t0: float                    # common start (clock.time() of rank 0)
    store: Any                   # the parameter store (mpips/runtime/mpi_transport.py, mpips/runtime/local_transport.py)
    control: Any                 # the control table (idem)
    log: RankLog
    paradigm: Paradigm
    iterations: int              # iterations per worker (global budget: rounds of every worker's batch)
    iterations_per_epoch: float  # of one worker (global budget: N / samples of a round, not rounded)
    num_params: int
    # GSSP gives a role one context per level of servers; the rows of `control`
    # are then the group's workers, or (global level) the group servers.
    epoch_pushes: int = 0            # pushes in `control` per epoch; 0 = workers x iterations
    clients: str = "worker"          # what writes the rows of `control`
    client_ranks: tuple[int, ...] = ()   # their world ranks; () = the workers'
    servers: str = "server"              # what applies the pushes in `control`
    server_ranks: tuple[int, ...] = ()   # their world ranks; () = the servers'
    checkpointer: Any = None         # this rank's part in checkpoints (mpips/runtime/checkpointer.py)
    total_samples: int = 0           # the global budget (mpips/runtime/budget.py); 0 under a per-worker one
    budget_table: Any = None         # the ControlTable whose CLAIMED slot counts claims (the global one)
    clock: Clock = WALL              # wall time, or the simulator's virtual time (mpips/runtime/clock.py)
    loss_fn: Any = None              # a user's loss(output, target) (mpips.train); None: cross-entropy

    def now(self) -> float:
        return self.clock.time() - self.t0

    @functools.cached_property
    def name(self) -> str:
        return f"rank {self.rank} ({self.role} {self.index})"

    def view(self):
        return self.control.view(self.control.read(), self.now())

    def wait(self, ready, *, what: str, describe, due=None) -> float:
        return self.clock.wait_until(ready, what=f"{self.name}: {what}", describe=describe,
                                     warn=self.config.stall_warn, timeout=self.config.stall_timeout,
                                     due=due)

    def describe_workers(self, workers) -> str:
        """Whom a wait on `workers` waits for, for stall messages: a worker
        that has not pushed (yet), 'workers 2 = rank 4 (clock 7)', or, for
        pushes made and not applied, the server that has not applied them,
        'server 0 = rank 0 (applied 5 of 6 pushes of worker 1)'. A gate waits
        on applied counts, so a stopped server holds up every worker: naming
        the workers (the waiting one itself among them) would blame the wrong
        ranks."""
        snap = self.control.read()
        rows = self.control.worker_rows(snap)
        applied = self.control.server_rows(snap)[:, len(S):]
        ranks = self.client_ranks or self.layout.worker_ranks
        server_ranks = self.server_ranks or self.layout.server_ranks
        parts, lagging = [], {}
        for j in workers:
            clock = int(rows[j, W.CLOCK])
            behind = [s for s in range(len(applied)) if applied[s, j] < clock]
            for s in behind:
                lagging.setdefault(s, []).append(f"{int(applied[s, j])} of {clock} pushes of "
                                                 f"{self.clients} {j}")
            if not behind:   # all its pushes applied: the worker itself is behind
                extra = ", done" if rows[j, W.DONE] else ""
                parts.append(f"{self.clients} {j} = rank {ranks[j]} (clock {clock}{extra})")
        parts += [f"{self.servers} {s} = rank {server_ranks[s]} (applied {', '.join(what)})"
                  for s, what in sorted(lagging.items())]
        return "; ".join(parts) if parts else "nothing (condition not met)"

    @property
    def epochs(self) -> float:
        """The run's length in epochs (a cosine schedule's end): the global
        budget's samples over the training set, or the iterations' epochs."""
        if self.total_samples:
            return self.total_samples / (self.iterations_per_epoch * self.paradigm.round_samples())
        return self.iterations / self.iterations_per_epoch

    def wait_for_slot(self, row: int, pushed: int) -> float:
        """Before `row` (a client of `store`) pushes again: wait until every
        server has taken its `pushed` earlier pushes, so its gradient slot is
        free (mpi_transport.ParameterStore). Gates that wait for a client's own
        pushes to be applied make this wait nothing."""
        control = self.control
        cells = [control.server_offset(s, len(S) + row) for s in range(control.servers)]

        def taken():
            return control.read_cells(cells)

        def describe():
            ranks = self.store.world_server_ranks
            counts = taken()
            return "; ".join(f"server {s} = rank {ranks[s]} (took {int(counts[s])} of {pushed} pushes)"
                             for s in np.flatnonzero(counts < pushed))

        return self.wait(lambda: bool((taken() >= pushed).all()),
                         what=f"{self.clients} {row}'s gradient slot for push {pushed + 1}",
                         describe=describe)

    def epochs_of(self, pushes: int) -> float:
        return pushes / (self.epoch_pushes or self.layout.workers * self.iterations_per_epoch)

    def end_of_run(self) -> None:
        """Every rank reaches the end, or the ones that do not are named within
        the stall timeout (mpips/runtime/rendezvous.py); server 0 has written the
        run's end by then, and notes in run.h5 which ranks did not finish."""
        layout = self.layout

        def name(rank):
            role, index = layout.role(rank)
            return f"{rank} ({role.replace('_', ' ')} {index})"
        try:
            allgather_within(self.comm, None, what="the end of the run", warn=self.config.stall_warn,
                             timeout=self.config.stall_timeout, name=name)
        except SetupTimeout as e:
            if self.rank == 0 and e.missing:   # the training's end is saved (roles._finish): say so
                self.log.flush()
                set_status(self.run_dir, "finished", f"rank(s) {', '.join(name(r) for r in e.missing)} did "
                                                     f"not finish; the training's end and final parameters are saved")
            e.status = 1
            raise

    def wait_for_servers_done(self, stop=None) -> None:
        """Before the collective window frees: every server has finished.
        `stop` (a done worker's) takes a checkpoint asked for meanwhile."""
        control = self.control
        cells = [control.server_offset(s, S.DONE) for s in range(control.servers)]

        def ready():
            return all(control.read_cells(cells) > 0)

        def describe():
            rows = self.control.server_rows(self.control.read())
            return ", ".join(f"server {s} (pushes applied {int(rows[s, S.PUSHES])})"
                             for s in np.flatnonzero(rows[:, S.DONE] == 0))

        if stop is None:
            self.wait(ready, what="waiting for the servers to finish", describe=describe)
        else:
            self.checkpointer.wait(self, ready, what="waiting for the servers to finish",
                                   describe=describe, stop=stop)
