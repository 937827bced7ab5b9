"""The checkpoint stop protocol under mpiexec -n 4 (pytest --with-mpi), on a
real control table: ranks 0, 1 are servers, 2, 3 workers; no training."""
from __future__ import annotations

import os
import shutil
import tempfile
import time
from types import SimpleNamespace

import h5py
import numpy as np
import pytest
from mpi4py import MPI

from mpips.config import Config
from mpips.io.checkpoint import checkpoint_files, decode, find_resume
from mpips.io.rundir import RunDir
from mpips.runtime.layout import Layout
from mpips.runtime.recovery.checkpointer import Checkpointer, Preempted
from mpips.runtime.state import G, S, W
from mpips.runtime.transport.mpi import ControlWindow as ControlTable
from mpips.runtime.transport.mpi import MPITransport
from mpips.runtime.transport.wait import wait_until

IDENT = {"model": "none", "workers": 2}


class _Log:
    def event(self, *args, **kw):
        pass

    def flush(self):
        pass


def _setup():
    comm = MPI.COMM_WORLD
    if comm.Get_size() != 4:
        pytest.skip("written for 4 ranks")
    run_dir = comm.bcast(tempfile.mkdtemp(prefix="mpips-ckpt-") if comm.Get_rank() == 0 else None)
    control = ControlTable(comm, 0, workers=2, servers=2)
    t0 = time.time()
    ctx = SimpleNamespace(
        rank=comm.Get_rank(), table=control, log=_Log(), paradigm=SimpleNamespace(state=dict),
        layout=Layout(servers=2, group_servers=0, workers=2),
        now=lambda: time.time() - t0, rank_name=lambda r: f"rank {r}",
        wait=lambda ready, what, describe: wait_until(ready, what=what, describe=describe,
                                                      warn=30, timeout=60))
    return comm, ctx, Checkpointer(MPITransport(comm, warn=30, timeout=60), RunDir(run_dir), Config(), IDENT,
                                   None), run_dir


def _ack(ctx):
    """This rank's acknowledgement slot: servers 0, 1 then workers 0, 1."""
    r = ctx.rank
    return ctx.table.server_offset(r, S.HALTED) if r < 2 else ctx.table.worker_offset(r - 2, W.HALTED)


def _teardown(comm, ctx, checkpointer, run_dir):
    comm.Barrier()
    checkpointer.close()
    checkpointer.comm.close()
    ctx.table.free()
    if comm.Get_rank() == 0:
        shutil.rmtree(run_dir, ignore_errors=True)


@pytest.mark.mpi(min_size=4)
def test_a_server_that_finished_cancels_the_checkpoint():
    comm, ctx, checkpointer, run_dir = _setup()
    if ctx.rank == 1:   # server 1 finished before it saw the request
        ctx.table.write(ctx.table.server_offset(1, S.DONE), [1.0])
    if ctx.rank == 0:
        ctx.table.write(G.CHECKPOINT, [1])
    comm.Barrier()
    if ctx.rank != 1:
        def never():
            raise AssertionError("a cancelled checkpoint saves nothing")

        checkpointer.halt(ctx, never, ack=_ack(ctx), coordinator=ctx.rank == 0)
        assert checkpointer.handled == 1
        assert ctx.table.read()[G.CHECKPOINT_GO] == -1
    comm.Barrier()
    assert checkpoint_files(run_dir) == []
    _teardown(comm, ctx, checkpointer, run_dir)


@pytest.mark.mpi(min_size=4)
def test_every_rank_stops_saves_and_leaves_on_preemption():
    comm, ctx, checkpointer, run_dir = _setup()
    if ctx.rank == 0:
        checkpointer.reason = "preemption"
        ctx.table.write(G.CHECKPOINT_EXIT, [1])
        ctx.table.write(G.CHECKPOINT, [1])
    comm.Barrier()
    with pytest.raises(Preempted):
        # servers report their steps, workers their clocks: the meta's cut
        checkpointer.halt(ctx, lambda: {"rank": ctx.rank, "x": np.arange(ctx.rank + 1),
                                        ("steps" if ctx.rank < 2 else "clock"): 10 + ctx.rank},
                          ack=_ack(ctx), coordinator=ctx.rank == 0)
    comm.Barrier()
    found = find_resume(run_dir, IDENT)
    assert found.meta["number"] == 1 and found.meta["reason"] == "preemption"
    assert found.meta["server_steps"] == [10, 11] and found.meta["clocks"] == [12, 13]
    assert found.meta["step"] == 10
    assert len(found.ranks) == 4
    state = decode(*found.ranks[ctx.rank])
    assert state["role"]["rank"] == ctx.rank and state["role"]["x"].tolist() == list(range(ctx.rank + 1))
    assert ("control" in state) == (ctx.rank == 0)   # the table, from the rank that hosts it
    with h5py.File(os.path.join(run_dir, "run.h5"), "r") as f:
        assert f.attrs["status"] == "preempted"
    _teardown(comm, ctx, checkpointer, run_dir)
