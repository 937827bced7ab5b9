"""ControlTable.view under mpiexec (pytest --with-mpi): the paradigms' view of
a table written through the window, with one server (its row taken as is)
and with two (minima and sums over servers)."""
from __future__ import annotations

import numpy as np
import pytest

from mpips.runtime.state import S, publish_client_row
from mpips.runtime.transport.mpi import ControlWindow as ControlTable

WORKERS = 3


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("servers", [1, 2])
def test_view_of_a_written_table(servers):
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    table = ControlTable(comm, 0, workers=WORKERS, servers=servers)
    applied = np.array([[4, 2, 7], [3, 5, 6]])[:servers]
    if comm.Get_rank() == 0:
        for j in range(WORKERS):
            publish_client_row(table, j, clock=10 + j, push_times=(2.0 + j, 1.0) if j else (0.0, 0.0),  # worker 0: no push yet
                               busy=0.5 * j, done=j == 2, wait_total=0.0, elapsed=0.0, samples=0)
        for s in range(servers):
            row = np.zeros(len(S) + WORKERS)
            row[S.PUSHES] = 100 + s
            row[S.PATH] = 1.5 + s
            row[len(S):] = applied[s]
            table.write(table.server_offset(s), row)
    comm.Barrier()
    view = table.view(table.read(), now=9.0)
    np.testing.assert_array_equal(view.clocks, [10, 11, 12])
    np.testing.assert_array_equal(view.applied, applied.min(axis=0))
    assert view.applied.dtype == np.int64
    np.testing.assert_array_equal(view.push_times, [[np.nan, np.nan], [3.0, 1.0], [4.0, 1.0]])
    np.testing.assert_array_equal(view.iter_times, [np.nan, 0.5, 1.0])
    np.testing.assert_array_equal(view.done, [False, False, True])
    assert view.updates == 100 and isinstance(view.updates, int)
    assert view.path_length == sum(1.5 + s for s in range(servers))
    # what polled gates read: the same numbers as lists, and one clock
    clocks, applied_now, done = view.progress()
    assert clocks == [10, 11, 12] and applied_now == applied.min(axis=0).tolist()
    assert [bool(d) for d in done] == [False, False, True]
    assert [view.clock(j) for j in range(WORKERS)] == [10, 11, 12]
    comm.Barrier()
    table.free()


@pytest.mark.mpi(min_size=2)
def test_stall_messages_name_the_server_that_holds_pushes_back():
    """A gate waits on applied counts: for pushes made and not applied the
    message names the server (world rank) that has not applied them, not
    the worker that made them (issue 16: "waiting for worker 1 = rank 2")."""
    from types import SimpleNamespace

    from mpi4py import MPI

    from mpips.runtime.context import Context, Level
    from mpips.runtime.layout import Layout

    comm = MPI.COMM_WORLD
    table = ControlTable(comm, 0, workers=2, servers=2)
    if comm.Get_rank() == 0:
        for j, (clock, rejected) in enumerate([(5, 0), (3, 1)]):
            publish_client_row(table, j, clock=clock, push_times=(0.0, 0.0), busy=0.0, done=False,
                               rejected=rejected, wait_total=0.0, elapsed=0.0, samples=0)
        for s, applied in enumerate([[5, 3], [4, 3]]):   # server 1 has not applied worker 0's 5th push
            row = np.zeros(len(S) + 2)
            row[len(S):] = applied
            table.write(table.server_offset(s), row)
    comm.Barrier()
    layout = Layout(servers=2, group_servers=0, workers=2)
    ctx = SimpleNamespace(table=table, level=Level(None, table, tuple(layout.worker_ranks),
                                                   tuple(layout.server_ranks), epoch_pushes=1),
                          rank_name=lambda rank: f"rank {rank}")   # (one host: no host named)
    assert Context.describe_workers(ctx, [0, 1]) == (
        "worker 1 = rank 3 (clock 3); server 1 = rank 1 (applied 4 of 5 pushes of worker 0)")
    assert Context.describe_workers(ctx, [0]) == "server 1 = rank 1 (applied 4 of 5 pushes of worker 0)"
    np.testing.assert_array_equal(table.view(table.read(), now=0.0).rejected, [0, 1])
    comm.Barrier()
    table.free()
