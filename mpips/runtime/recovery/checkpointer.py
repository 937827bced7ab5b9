"""Coordinated checkpoints: stop every rank at one consistent cut, save it, resume from it.

When. Server 0 asks for a checkpoint every `checkpoint_every` seconds of
training, and when the job gets SIGUSR1: Slurm's `--signal=B:USR1@T` before
the time limit, passed on by jobs/common.sh and mpirun to every rank. Each
rank's handler only sets a flag (without one, USR1 would kill the rank);
server 0 acts on its own. After the checkpoint the signal asked for, every
rank ends with PREEMPTED_EXIT, and jobs/common.sh requeues the job.

The cut, through the control table (state.G.CHECKPOINT*, W.HALTED, S.HALTED):
1. server 0 writes CHECKPOINT = n (CHECKPOINT_EXIT = n before it, for the signal);
2. a worker stops at its next gate, i.e. after the push and tick of the
   iteration in progress (a done worker: while it waits for the end), and
   writes HALTED = n in its row;
3. a server stops between two applies once every worker row says halted or
   done, and writes HALTED = n in its row. What was pushed to it and not yet
   applied stays in its gradient window and is saved as it is: a BSP round
   cut in half stays half, and every paradigm keeps its own rules;
4. server 0, once every server row says halted, writes GO = n. If a server
   finished instead (the last push landed while the request travelled), it
   writes GO = -n: cancelled, everyone carries on and the run ends;
5. on GO = n nothing is in flight and nothing changes: every rank flushes
   its log and hands its state to rank 0 (one gather), which writes the file
   (mpips/io/checkpoint.py).

A rank's state: its role's `state()` (a server: shard, pending gradient,
optimizer state, counters; a worker: clock, data position, compressor
residual), the paradigm's `state()`, torch's and numpy's RNG states, and on
the rank hosting the control table the whole table (clocks, push times,
Sync-Switch's mode, ...). `restore` puts all of it back before the start
barrier of a resumed job, whose clocks, steps and training time go on from
the cut; it is segment k of the run (rank logs rank-<r>.s<k>.h5, an event
`segment`). A periodic checkpoint loses what was done after it; RunLog
leaves those rows out.

GSSP has two levels of tables. Its group servers relay: one that sees
CHECKPOINT = n in the global table writes it into its group's table (`relay`),
stops once its workers have (or are done), acknowledges in its global row,
and on the global GO hands the same GO (and CHECKPOINT_EXIT) down to its
workers (`halt(..., group=)`). A group server whose workers are all done keeps
relaying until the global servers finish, and its workers wait for it, so that
every rank takes part in every checkpoint (the gather is collective). The
groups are kept in the checkpoint's meta: a resumed job does not profile again.
"""
from __future__ import annotations

import signal
import sys
import threading
import time
from typing import Protocol

import numpy as np
import torch

from ...io.checkpoint import Resume, decode, encode
from ...io.log import DiskFull
from ...io.rundir import RunDir
from ..state import G, S, W
from ..transport.protocols import EveryRank
from . import preemption

PREEMPTED_EXIT = preemption.PREEMPTED_EXIT


class Preempted(EveryRank):
    """Raised on every rank once the checkpoint the preemption signal asked for
    is written; `status`: the job's exit status (3 after SIGUSR1: requeue;
    128 + the signal's number after SIGTERM or SIGINT), as server 0's signal says."""

    def __init__(self, message: str, status: int = PREEMPTED_EXIT):
        super().__init__(message)
        self.status = status


class DiskFullAtCheckpoint(EveryRank):
    """Raised on every rank when the checkpoint's file found the disk full;
    `str()` is DiskFull's line. (A rank's own log that does ends the job
    from that rank: mpips/runtime/job/train.py.)"""


class Checkpoints(Protocol):
    """A rank's part in checkpoints, as its roles see it: `Checkpointer`, or
    `NoCheckpoints` where none are taken."""

    resumed: dict | None      # the meta of the checkpoint resumed from, this rank's
    state: dict | None        # state in it, and the training seconds before it
    elapsed: float
    meta_extra: dict

    def begin(self, ctx) -> None: ...

    def restore(self, ctx, role) -> None: ...

    def maybe_request(self, ctx, view) -> None: ...

    def relay(self, up, group) -> None: ...

    def clients_stopped(self, table, snap: np.ndarray) -> bool: ...

    def wait(self, ctx, ready, *, what: str, describe, stop, due=None) -> float: ...

    def halt(self, ctx, role_state, *, ack: int | None, coordinator: bool = False, group=None) -> None: ...

    def close(self) -> None: ...


class Checkpointer:
    """One rank's part in checkpoints: the stop protocol, saving, restoring.

    Collective: every rank constructs it; rank 0 passes what `find_resume`
    found, and each rank receives its own part of it.
    """

    def __init__(self, comm, run: RunDir, config, ident: dict, found: Resume | None):
        self.comm = comm   # transport.Collectives
        self.rank = comm.rank
        self.run = run
        self.config = config
        self.identity = ident
        # SIGUSR1 sets preemption's flag (unless `python -m mpips` made it so); `close` puts back the handler before
        self._previous = None
        if (threading.current_thread() is threading.main_thread()
                and signal.getsignal(signal.SIGUSR1) is not preemption._handle):
            self._previous = signal.signal(signal.SIGUSR1, preemption._handle)
        self.resumed, self.path, self.segment = comm.bcast(
            (found.meta, found.path, found.segment) if found else (None, None, 0))
        self.state = decode(*comm.scatter(found.ranks if found else None)) if self.resumed else None
        self.handled = self.resumed["number"] if self.resumed else 0   # latest request dealt with
        self.elapsed = self.resumed["time"] if self.resumed else 0.0   # training seconds before
        self.next_due = self.elapsed + config.checkpoint_every
        self.reason = ""             # server 0: why it asked for the pending one
        self.exiting = False         # server 0: the preemption checkpoint is asked for
        self.cut_time = 0.0
        self.relayed = 0             # a GSSP group server: latest request passed to its group
        self.meta_extra: dict = {}   # rank 0: more for the meta (GSSP: the groups)
        if self.rank == 0 and not self.resumed:
            run.clear_checkpoints()
        self._closed = False

    def close(self) -> None:
        """SIGUSR1's handler put back; a later checkpoint is an error."""
        if not self._closed and self._previous is not None:
            signal.signal(signal.SIGUSR1, self._previous)
        self._closed = True

    def __enter__(self) -> "Checkpointer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # start -------------------------------------------------------------------------
    def begin(self, ctx) -> None:
        """Rank 0, once the log is open: the segment event (RunLog's cut)."""
        if ctx.rank != 0:
            return
        m = self.resumed or {}
        ctx.log.event(self.elapsed, "segment", segment=self.segment, resumed_from=self.path,
                      checkpoint=self.handled, step=m.get("step", 0), time=self.elapsed,
                      clocks=m.get("clocks", [0] * ctx.layout.workers),
                      server_steps=m.get("server_steps", [0] * ctx.layout.servers))
        ctx.log.flush()
        if self.resumed:
            print(f"mpips: resuming from {self.path}: segment {self.segment}, step {m['step']}, "
                  f"{self.elapsed:.1f} s of training done", flush=True)

    def restore(self, ctx, role) -> None:
        """Before the start barrier: put this rank back where the checkpoint
        left it (`role` has state()/load_state()); nothing on a fresh start."""
        if self.state is None:
            return
        s = self.state
        if "control" in s:
            ctx.table.write(0, ctx.table.checkpointed(s["control"]))
        role.load_state(s["role"])
        ctx.paradigm.load_state(s["paradigm"])
        torch.set_rng_state(s["rng"]["torch"])
        np.random.set_state(tuple(s["rng"]["numpy"]))

    # the request ---------------------------------------------------------------------
    def requested(self, snap: np.ndarray) -> bool:
        """A checkpoint not dealt with yet is asked for in this table snapshot."""
        return snap[G.CHECKPOINT] > self.handled

    def maybe_request(self, ctx, view) -> None:
        """Server 0, at every loop: ask for a checkpoint when one is due."""
        if ctx.rank != 0:
            return   # GSSP's group servers are server 0 of their group's table: they `relay`
        if preemption.received() and not self.exiting:
            reason = "preemption"
        elif self.config.checkpoint_every and ctx.now() >= self.next_due:
            reason = "periodic"
        else:
            return   # (the common case first: this runs at every poll)
        if self.requested(ctx.table.latest) or view.done.all():
            return   # one at a time; none once every worker is done (the run ends anyway)
        n = self.handled + 1
        self.reason = reason
        if reason == "preemption":
            self.exiting = True
            ctx.table.write(G.CHECKPOINT_EXIT, [n])   # before the request: read after GO
        ctx.table.write(G.CHECKPOINT, [n])
        ctx.log.event(ctx.now(), "checkpoint_request", number=n, reason=reason)

    def relay(self, up, group) -> None:
        """A GSSP group server, at every loop: a checkpoint asked for in the
        global table (`up`) is asked for in its group's table too."""
        n = int(up.table.read_cells([G.CHECKPOINT])[0])
        if n > max(self.handled, self.relayed):
            self.relayed = n
            group.table.write(G.CHECKPOINT, [n])

    def clients_stopped(self, control, snap: np.ndarray) -> bool:
        """A server may stop: a checkpoint is asked for and every client row
        has stopped for it or is done."""
        if not self.requested(snap):
            return False
        rows = control.worker_rows(snap)
        return bool(((rows[:, W.HALTED] >= snap[G.CHECKPOINT]) | (rows[:, W.DONE] > 0)).all())

    # the stop ------------------------------------------------------------------------------
    def wait(self, ctx, ready, *, what: str, describe, stop, due=None) -> float:
        """ctx.wait(ready) that also ends for a checkpoint asked for meanwhile
        and then runs `stop()` (which takes it) before waiting on. `ready`
        reads the control table and nothing else: a poll that finds it
        unchanged is skipped (wait.wait_until's `changed`)."""
        total = 0.0
        while True:
            halt = []

            def ready_or_halt():
                # before `ready`: a paradigm's gate may decide something once
                # per clock (DSSP's credits) that a stop here must not spend.
                # The table as `ready` read it at the poll before: one read a poll
                if self.requested(ctx.table.latest):
                    halt.append(True)
                    return True
                return ready()

            total += ctx.wait(ready_or_halt, what=what, describe=describe, due=due, changed=ctx.table.changed)
            if not halt:
                return total
            stop()

    def halt(self, ctx, role_state, *, ack: int | None, coordinator: bool = False, group=None) -> None:
        """Stop here for the checkpoint asked for: acknowledge in this rank's
        row (offset `ack`), wait for GO, save `role_state()`. Returns when the
        run goes on; raises Preempted when it ends here. `group`: a GSSP group
        server's group level, whose workers wait for GO in their own table."""
        if self._closed:
            raise RuntimeError("Checkpointer used after close()")
        control = ctx.table
        n = int(control.read()[G.CHECKPOINT])
        if ack is not None:   # (the evaluator rank: nobody waits for it to stop)
            control.write(ack, [n])
        if coordinator:
            def stopped():
                rows = control.server_rows(control.read())
                return bool(((rows[:, S.HALTED] >= n) | (rows[:, S.DONE] > 0)).all())

            def describe():
                rows = control.server_rows(control.read())
                return ", ".join(f"server {s} (steps {int(rows[s, S.STEPS])})"
                                 for s in np.flatnonzero((rows[:, S.HALTED] < n) & (rows[:, S.DONE] == 0)))

            ctx.wait(stopped, what=f"servers stopping for checkpoint {n}", describe=describe)
            finished = bool((control.server_rows(control.latest)[:, S.DONE] > 0).any())
            go = -n if finished else n
            self.cut_time = ctx.now()
            control.write(G.CHECKPOINT_GO, [go])
        else:
            ctx.wait(lambda: abs(control.read()[G.CHECKPOINT_GO]) == n,
                     what=f"stopped for checkpoint {n}",
                     describe=lambda: "server 0 (rank 0) to see every server stopped")
            go = int(control.latest[G.CHECKPOINT_GO])
        exiting = go > 0 and int(control.read()[G.CHECKPOINT_EXIT]) == n
        if group is not None:
            if exiting:
                group.table.write(G.CHECKPOINT_EXIT, [n])   # read by its workers after GO
            group.table.write(G.CHECKPOINT_GO, [go])
        self.handled = n
        if go < 0:
            if coordinator:
                ctx.log.event(ctx.now(), "checkpoint_cancelled", number=n,
                              reason="a server finished meanwhile: the run is ending")
            return
        path, status = self._save(group or ctx, n, role_state(), exiting=exiting)
        if exiting:
            preemption.clear()   # dealt with
            raise Preempted(f"preempted after checkpoint {n} ({path})", status)

    def _save(self, ctx, n: int, role_state: dict, *, exiting: bool) -> tuple[str | None, int]:
        """Write checkpoint n; (its path, the job's exit status if it is the exiting one)."""
        t = time.perf_counter()
        state = {"role": role_state, "paradigm": ctx.paradigm.state(),
                 "rng": {"torch": torch.get_rng_state(), "numpy": list(np.random.get_state())}}
        if ctx.table.is_home():
            state["control"] = ctx.table.read()
        ctx.log.flush()   # the log up to the cut is on disk before the checkpoint is
        # every rank is here: quick. With each state, what the meta says of the cut.
        mark = (role_state.get("clock"), role_state.get("steps"))
        gathered = self.comm.gather(
            (encode(state), mark),
            lambda ready, missing: ctx.wait(ready, what=f"checkpoint {n}: every rank's state at rank 0",
                                            describe=lambda: ", ".join(map(ctx.rank_name, missing()))))
        result: tuple[str | None, str | None, bool, int] | None = None
        if self.rank == 0:
            meta = self._meta(ctx, n, [m for _, m in gathered])
            gathered = [g for g, _ in gathered]
            status = preemption.exit_status(preemption.which())   # server 0's signal decides
            try:
                result = (self.run.write_checkpoint(meta, gathered), None, False, status)
            except DiskFull as e:
                result = (None, str(e), True, status)
            except OSError as e:
                result = (None, f"{type(e).__name__}: {e}", False, status)
        self.comm.barrier(lambda test: ctx.wait(test, what=f"checkpoint {n} being written",
                                                describe=lambda: "rank 0 writing the checkpoint file"))
        path, error, full, status = self.comm.bcast(result)
        if full:
            # the job ends here, every rank at the same cut: a disk that cannot take
            # a checkpoint will soon not take the logs, and a run that goes on
            # unprotected loses its work to a preemption; the checkpoints before
            # stay whole (the newest one is what the job resumes from)
            raise DiskFullAtCheckpoint(error)
        self.next_due = ctx.now() + self.config.checkpoint_every
        if self.rank == 0:
            seconds = time.perf_counter() - t
            if error:
                print(f"mpips: warning: checkpoint {n} not written: {error}", file=sys.stderr, flush=True)
            else:
                print(f"mpips: checkpoint {n} ({self.reason}) at step {meta['step']}: {path} "
                      f"({seconds:.2f} s)", flush=True)
            ctx.log.event(self.cut_time, "checkpoint", number=n, reason=self.reason, path=path,
                          error=error, step=meta["step"], clocks=meta["clocks"], seconds=seconds)
            if exiting:
                ctx.log.flush()
                self.run.write_end(wall_seconds=self.cut_time, final_params=None, status="preempted")
                if status == PREEMPTED_EXIT:
                    print(f"mpips: preempted: exiting with status {PREEMPTED_EXIT} to be requeued", flush=True)
                else:
                    print(f"mpips: stopped by {signal.Signals(status - 128).name}: exiting with status "
                          f"{status} (not requeued); the same job with the same --run-dir resumes "
                          f"from {path}", flush=True)
        return path, status

    def _meta(self, ctx, n: int, marks: list) -> dict:
        """`marks[r]`: rank r's (clock, steps) at the cut: the workers' clocks,
        the steps of the servers and GSSP's group servers (by world rank, as
        the log's applies rows are)."""
        layout = ctx.layout
        clocks = [int(marks[r][0]) for r in layout.worker_ranks]
        steps = [int(marks[r][1]) for r in layout.server_ranks + layout.group_server_ranks]
        return {"number": n, "reason": self.reason, "segment": self.segment, "time": self.cut_time,
                "step": steps[0], "server_steps": steps, "clocks": clocks,
                "identity": self.identity, "config": self.config.to_dict(), "written": time.time(),
                **self.meta_extra}


class NoCheckpoints:
    """The `Checkpoints` of a job that takes
    none (`mpips simulate`: one process, minutes long, nothing to
    preempt): it never asks for one, so every wait is a plain wait and
    nothing is collective."""

    resumed, path, segment, state, handled, elapsed = None, None, 0, None, 0, 0.0
    begin = Checkpointer.begin   # the log's first segment

    def __init__(self):
        self.meta_extra: dict = {}

    def _nothing(self, *args, **kwargs) -> None:
        """Nothing to restore, to ask for, to relay, to stop for or to close."""

    restore = maybe_request = relay = halt = close = _nothing

    def clients_stopped(self, table, snap) -> bool:
        return False

    def wait(self, ctx, ready, *, what: str, describe, stop, due=None) -> float:
        return ctx.wait(ready, what=what, describe=describe)   # nothing to stop for (and nothing polls)
