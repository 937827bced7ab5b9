"""The RMA windows under mpiexec -n 4 (pytest --with-mpi): exact, order-independent pushes;
the transport's gather.

One body runs under COMM_WORLD: the first ranks serve, the others push.
"""
from __future__ import annotations

import time

import numpy as np
import pytest

from mpips.runtime.state import S
from mpips.runtime.transport.mpi import ControlWindow as ControlTable
from mpips.runtime.transport.mpi import ParameterWindows as ParameterStore

N = 100_003          # not a multiple of anything: uneven shards
K = 40               # pushes per worker


def push_vector(row: int, number: int) -> np.ndarray:
    # Arbitrary floats: a sum of them depends on its order, so "exact" means
    # the one order the store promises (rows ascending).
    return np.random.default_rng([row, number]).standard_normal(N).astype(np.float32)


def row_order_sum(vectors: list[np.ndarray]) -> np.ndarray:
    out = vectors[0].copy()
    for v in vectors[1:]:
        out += v
    return out


def taken_column(table: ControlTable, row: int) -> int:
    return len(S) + row


def wait(cond, what: str, timeout: float = 60.0) -> None:
    start = time.monotonic()
    while not cond():
        assert time.monotonic() - start < timeout, what
        time.sleep(1e-4)


@pytest.mark.mpi(min_size=3)
def test_a_push_s_head_and_read_reach_each_server_for_an_async_rule():
    """An async rule's push through the windows (state.Head): each of two
    servers gets its own version, the push's scale and the parameters it was
    read at, beside the push itself, and sums what the rule makes of it."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    servers, workers = 2, size - 2
    store = ParameterStore(comm, [0, 1], N, clients=workers, reads=True)
    if rank >= servers:
        row = rank - servers
        store.push(push_vector(row, 1), row=row, number=1, key=row, versions=[10 + row, 20 + row],
                   scale=0.25 * (row + 1), read=push_vector(row, 2))
    comm.Barrier()
    if store.shard_index is not None:
        s = store.shard_index
        lo, hi = store.bounds[s]
        seen = []

        def each(row, head, push, read):
            seen.append((row, head.number, head.key, head.version, head.scale))
            np.testing.assert_array_equal(read, push_vector(row, 2)[lo:hi])
            return push * np.float32(2)

        out = np.empty(store.count, np.float32)
        assert store.take_gradient(out, np.ones(workers), np.zeros(workers), each=each) == workers
        assert seen == [(j, 1, j, 10 * (s + 1) + j, 0.25 * (j + 1)) for j in range(workers)]
        np.testing.assert_array_equal(out, row_order_sum([push_vector(j, 1)[lo:hi] * np.float32(2)
                                                          for j in range(workers)]))
    comm.Barrier()
    store.free()


@pytest.mark.mpi(min_size=3)
@pytest.mark.parametrize("servers", [1, 2])
def test_pushes_sum_in_row_order_whatever_the_arrival_order(servers):
    """Workers push one float vector each, in a different order each time;
    the take is bit-identical to the row-order sum every time."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    workers = size - servers
    store = ParameterStore(comm, list(range(servers)), N, clients=workers)
    rounds = 4
    for r in range(rounds):
        order = np.random.default_rng(r).permutation(workers)   # the arrival order of round r
        for row in order:
            if rank == servers + row:
                store.push(push_vector(row, r + 1), row=row, number=r + 1)
            comm.Barrier()   # one push at a time, in this round's order
        if store.shard_index is not None:
            out = np.empty(store.count, np.float32)
            clocks, consumed = np.full(workers, r + 1), np.full(workers, r)
            assert store.take_gradient(out, clocks, consumed) == workers
            lo, hi = store.bounds[store.shard_index]
            expected = row_order_sum([push_vector(j, r + 1)[lo:hi] for j in range(workers)])
            np.testing.assert_array_equal(out, expected)
            # and the check above has teeth: with 3 or more terms, another
            # order gives another float sum
            backwards = row_order_sum([push_vector(j, r + 1)[lo:hi] for j in reversed(range(workers))])
            assert workers < 3 or not np.array_equal(backwards, expected)
        comm.Barrier()
    store.free()


@pytest.mark.mpi(min_size=3)
def test_keys_order_the_sum_before_rows():
    """Keys (where a worker's batch starts in the global stream) decide the
    order: the same batches claimed by other workers sum the same."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    workers = size - 1
    store = ParameterStore(comm, [0], N, clients=workers)
    sums = []
    for r, owners in enumerate([list(range(workers)), list(reversed(range(workers)))]):
        # batch b (key 16 * b) is pushed by worker owners[b]
        for b, row in enumerate(owners):
            if rank == 1 + row:
                store.push(push_vector(99, b), row=row, number=r + 1, key=16 * b)
        comm.Barrier()
        if rank == 0:
            out = np.empty(N, np.float32)
            assert store.take_gradient(out, np.full(workers, r + 1), np.full(workers, r)) == workers
            sums.append(out.copy())
        comm.Barrier()
    if rank == 0:
        np.testing.assert_array_equal(sums[0], sums[1])
        np.testing.assert_array_equal(sums[0], row_order_sum([push_vector(99, b) for b in range(workers)]))
    store.free()


@pytest.mark.mpi(min_size=3)
@pytest.mark.parametrize("servers", [1, 2])
def test_concurrent_flow_controlled_pushes_are_taken_exactly(servers):
    """Workers push K times as fast as their slots allow while servers take:
    every take equals the row-order sum of exactly the pushes it counted."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    workers = size - servers
    store = ParameterStore(comm, list(range(servers)), N, clients=workers)
    table = ControlTable(comm, 0, workers, servers)
    if rank >= servers:
        row = rank - servers
        for c in range(K):
            wait(lambda: (table.server_rows(table.read())[:, taken_column(table, row)] >= c).all(),
                 "slot never freed")
            store.push(push_vector(row, c + 1), row=row, number=c + 1)
            table.write(table.worker_offset(row), [c + 1])   # the clock, after the push
    else:
        s = rank
        lo, hi = store.bounds[s]
        consumed = np.zeros(workers, np.int64)
        out = np.empty(store.count, np.float32)
        takes = 0
        while (consumed < K).any():
            clocks = table.worker_rows(table.read())[:, 0].astype(np.int64)
            if not (clocks > consumed).any():
                time.sleep(1e-4)
                continue
            n = store.take_gradient(out, clocks, consumed)
            counted = [j for j in range(workers) if clocks[j] > consumed[j]]
            assert n == len(counted)
            expected = row_order_sum([push_vector(j, int(clocks[j]))[lo:hi] for j in counted])
            np.testing.assert_array_equal(out, expected)
            consumed = clocks
            table.write(table.server_offset(s, len(S)), consumed)
            takes += 1
        assert takes >= K   # no worker got more than one push into a take
    comm.Barrier()
    table.free()
    store.free()


@pytest.mark.mpi(min_size=2)
def test_a_counted_push_never_written_adds_nothing():
    """A rejected push (the clock ticks, the slot is not written) is skipped:
    the slot's older push is not applied again."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    workers = size - 1
    store = ParameterStore(comm, [0], N, clients=workers)
    if rank == 1:
        store.push(push_vector(0, 1), row=0, number=1)
    comm.Barrier()
    if rank == 0:
        out = np.empty(N, np.float32)
        clocks = np.zeros(workers, np.int64)
        clocks[0] = 1
        assert store.take_gradient(out, clocks, np.zeros(workers, np.int64)) == 1
        np.testing.assert_array_equal(out, push_vector(0, 1))
        clocks[0] = 2   # push 2 rejected: counted, never written
        assert store.take_gradient(out, clocks, clocks - 1 + (np.arange(workers) != 0)) == 0
        assert not out.any()
    comm.Barrier()
    store.free()


@pytest.mark.mpi(min_size=2)
def test_sparse_pushes_land_on_a_zeroed_slot():
    """A sparse store zeroes a slot once taken: a dense push then a sparse one
    sum to the sparse values only."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    servers = min(2, comm.Get_size() - 1)
    workers = comm.Get_size() - servers
    store = ParameterStore(comm, list(range(servers)), N, clients=workers, sparse=True)
    idx = np.array([0, 5, N // 2, N - 1])
    vals = np.array([1.5, -2.25, 3.0, 0.125], np.float32)
    out = np.empty(store.count, np.float32)
    clocks, consumed = np.zeros(workers, np.int64), np.zeros(workers, np.int64)
    for number, sparse in ((1, False), (2, True)):
        if rank == servers:
            if sparse:
                store.push_sparse(idx, vals, row=0, number=number)
            else:
                store.push(push_vector(0, number), row=0, number=number)
        comm.Barrier()
        clocks[0] = number
        if store.shard_index is not None:
            assert store.take_gradient(out, clocks, consumed) == 1
            lo, hi = store.bounds[store.shard_index]
            if sparse:
                expected = np.zeros(N, np.float32)
                expected[idx] = vals
            else:
                expected = push_vector(0, number)
            np.testing.assert_array_equal(out, expected[lo:hi])
        consumed[0] = number
        comm.Barrier()
    store.free()


@pytest.mark.mpi(min_size=2)
def test_a_sparse_push_puts_dcs_read_at_its_indices_and_the_rule_sums_as_with_the_whole_read():
    """DC's read goes with a sparse push at its indices only (its correction
    is zero elsewhere): the server finds the read there, the earlier dense
    read elsewhere, and DC-adaptive makes of the push what it makes of the
    same push with the whole read, bit for bit."""
    from mpi4py import MPI

    from mpips.paradigms.async_rules import AsyncRule

    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    servers = min(2, comm.Get_size() - 1)
    workers = comm.Get_size() - servers
    store = ParameterStore(comm, list(range(servers)), N, clients=workers, sparse=True, reads=True)
    idx = np.array([0, 5, N // 2, N - 1])
    vals = np.array([1.5, -2.25, 3.0, 0.125], np.float32)
    first, second = push_vector(7, 1), push_vector(7, 2)   # the parameters read at each push
    out = np.empty(store.count, np.float32)
    clocks, consumed = np.zeros(workers, np.int64), np.zeros(workers, np.int64)
    for number, sparse in ((1, False), (2, True)):
        if rank == servers:
            if sparse:
                store.push_sparse(idx, vals, row=0, number=number, scale=0.5, read=second)
            else:
                store.push(push_vector(0, number), row=0, number=number, scale=0.5, read=first)
        comm.Barrier()
        clocks[0] = number
        if store.shard_index is not None and sparse:
            lo, hi = store.bounds[store.shard_index]
            now = push_vector(8, 0)[lo:hi]
            dense = np.zeros(N, np.float32)
            dense[idx] = vals
            mine = (idx >= lo) & (idx < hi)
            rule, whole = AsyncRule("dc-adaptive", workers), AsyncRule("dc-adaptive", workers)

            def each(row, head, push, read):
                expected_read = first[lo:hi].copy()
                expected_read[idx[mine] - lo] = second[idx[mine]]
                np.testing.assert_array_equal(read, expected_read)
                np.testing.assert_array_equal(push, dense[lo:hi])
                made, _ = rule.apply(push, tau=3, scale=head.scale, now=now, read=read)
                reference, _ = whole.apply(dense[lo:hi], tau=3, scale=0.5, now=now, read=second[lo:hi])
                assert made.tobytes() == reference.tobytes()
                assert not mine.any() or (made != dense[lo:hi]).any()   # the correction is there
                return made

            assert store.take_gradient(out, clocks, consumed, each=each) == 1
        elif store.shard_index is not None:
            assert store.take_gradient(out, clocks, consumed) == 1
        consumed[0] = number
        comm.Barrier()
    store.free()


@pytest.mark.mpi(min_size=2)
def test_pending_slots_round_trip():
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    workers = comm.Get_size() - 1
    store = ParameterStore(comm, [0], N, clients=workers)
    if rank == 1:
        store.push(push_vector(0, 1), row=0, number=1)
    comm.Barrier()
    if rank == 0:
        saved = store.pending()
        np.testing.assert_array_equal(saved["slots"][0], push_vector(0, 1))
        assert saved["heads"][:, 0].tolist() == [1] + [0] * (workers - 1)
        store.restore_pending({"slots": np.zeros_like(saved["slots"]), "heads": np.zeros((workers, 2), np.int64)})
        store.restore_pending(saved)
        out = np.empty(N, np.float32)
        clocks = np.zeros(workers, np.int64)
        clocks[0] = 1
        assert store.take_gradient(out, clocks, np.zeros(workers, np.int64)) == 1
        np.testing.assert_array_equal(out, push_vector(0, 1))
    comm.Barrier()
    store.free()


@pytest.mark.mpi(min_size=2)
def test_pull_reads_every_shard():
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    servers = min(2, comm.Get_size() - 1)
    store = ParameterStore(comm, list(range(servers)), N)
    if store.shard_index is not None:
        lo, hi = store.bounds[store.shard_index]
        store.shard[:] = np.arange(lo, hi, dtype=np.float32)
        store.publish()
    comm.Barrier()
    out = np.zeros(N, np.float32)
    store.pull(out)
    np.testing.assert_array_equal(out, np.arange(N, dtype=np.float32))
    comm.Barrier()
    store.free()


@pytest.mark.mpi(min_size=2)
def test_control_table_fetch_and_add_is_atomic():
    """Every rank adds to a counter cell at once: each sees a distinct value
    before its add, the read returns the total in the cell's place, and a
    fractional amount is refused (the counters are int64, added lock-free)."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    slot = 7
    table = ControlTable(comm, 0, workers=comm.Get_size(), servers=1, counters=(slot,))
    seen = [table.add(slot, 2) for _ in range(100)]
    assert seen == sorted(seen)
    every = sum(comm.allgather(seen), [])
    assert sorted(every) == [2.0 * k for k in range(100 * comm.Get_size())]
    comm.Barrier()
    assert table.read()[slot] == 200 * comm.Get_size()
    with pytest.raises(ValueError, match="not a whole number"):
        table.add(slot, 0.5)
    comm.Barrier()
    table.free()


@pytest.mark.mpi(min_size=2)
def test_a_restored_table_sets_its_counters():
    """A checkpoint's table written back whole (before the run starts) sets
    the counters it holds: the next fetch-and-add goes on from there."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    slot = 7
    table = ControlTable(comm, 0, workers=comm.Get_size(), servers=1, counters=(slot,))
    if comm.Get_rank() == 0:
        saved = np.arange(table.size, dtype=np.float64)
        table.write(0, saved)
    comm.Barrier()
    assert table.read()[slot] == slot
    comm.Barrier()
    if comm.Get_rank() == 0:
        assert table.add(slot, 3) == slot and table.read()[slot] == slot + 3
    comm.Barrier()
    table.free()


@pytest.mark.mpi(min_size=2)
def test_a_poll_sees_another_ranks_write_as_changed_until_it_reads():
    """`changed` (each rank's count of its writes) tells a poll that another
    rank wrote, and nothing more once it read the table."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    table = ControlTable(comm, 0, workers=size, servers=1)
    table.read()
    comm.Barrier()
    assert not table.changed()
    comm.Barrier()
    if rank == size - 1:
        table.write(table.worker_offset(rank, 1), [5.0, 6.0])
    comm.Barrier()
    assert table.changed()
    assert table.worker_rows(table.read())[size - 1, 1:3].tolist() == [5.0, 6.0]
    assert not table.changed()
    comm.Barrier()
    table.free()


@pytest.mark.mpi(min_size=2)
def test_a_worker_waiting_for_its_slot_names_the_server_when_it_stalls():
    """A push whose earlier one no server took yet waits (flow control), and
    after stall_timeout fails naming the server and its count."""
    from types import SimpleNamespace

    from mpi4py import MPI

    from mpips.config import load
    from mpips.runtime.context import Context, Level, Plan, Services
    from mpips.runtime.layout import Layout
    from mpips.runtime.transport.wait import StallError, WallClock

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    workers = size - 1
    store = ParameterStore(comm, [0], N, clients=workers)
    table = ControlTable(comm, 0, workers, 1)
    config = load(overrides={"stall_timeout": 1.0, "stall_warn": 100.0})   # the least allowed
    plan = Plan(config, Layout(1, 0, workers), run=None, iterations=1, iterations_per_epoch=1, epochs=1.0,
                total_samples=0, num_params=N, sparse=False)
    level = Level(store, table, client_ranks=tuple(range(1, size)), server_ranks=(0,), epoch_pushes=workers)
    no_log = SimpleNamespace(flush_if_due=lambda: None)   # (nothing logged: nothing to flush while waiting)
    ctx = Context(plan, level, Services(no_log, WallClock(), None, table), None, rank,
                  "worker" if rank else "server", max(rank - 1, 0))
    if rank == 1:
        assert ctx.wait_for_slot(0, 0) == 0.0            # the first push never waits
        with pytest.raises(StallError, match=r"worker 0's gradient slot for push 2.*"
                                             r"server 0 = rank 0 \(took 0 of 1 pushes\)"):
            ctx.wait_for_slot(0, 1)                      # push 1 not taken: the slot is full
    comm.Barrier()
    if rank == 0:   # the server takes push 1
        table.write(table.server_offset(0, len(S)), [1])
    comm.Barrier()
    if rank == 1:
        assert ctx.wait_for_slot(0, 1) == 0.0
    comm.Barrier()
    table.free()
    store.free()


@pytest.mark.mpi(min_size=2)
def test_a_window_used_after_free_is_an_error_naming_it():
    """A window is a context manager; its end frees it (collectively, once),
    and a later use is a Freed error, not a call on a freed MPI handle. The
    transport frees what it made the same way."""
    from mpi4py import MPI

    from mpips.runtime.transport.mpi import Freed, MPITransport
    from mpips.runtime.transport.protocols import LevelSpec

    comm = MPI.COMM_WORLD
    with ParameterStore(comm, [0], 10, clients=comm.Get_size() - 1) as store, \
            ControlTable(comm, 0, workers=comm.Get_size() - 1, servers=1) as table:
        out = np.empty(10, np.float32)
        store.pull(out)
        table.read()
    store.free()   # a second free: nothing
    with pytest.raises(Freed, match="ParameterWindows used after free"):
        store.pull(out)
    with pytest.raises(Freed, match="ControlWindow used after free"):
        table.read()
    size = comm.Get_size()
    with MPITransport(comm, warn=30, timeout=60) as transport:
        handles = transport.level([LevelSpec(members=tuple(range(size)), servers=(0,), table_rows=size - 1,
                                             slot_rows=tuple(range(size - 1)))], n=10, sparse=False)
    with pytest.raises(Freed):
        handles[comm.Get_rank()].table.read()
    with pytest.raises(Freed):
        transport.first_to_fail()


@pytest.mark.mpi(min_size=2)
def test_the_transport_renumbers_the_ranks_in_the_placements_order():
    """`order` (rank 0's; the placement's, mpips/runtime/placement.py) makes
    launched rank order[r] the transport's rank r: a split communicator on
    which the windows are made, the hosts in the new order; the launcher's
    own order splits nothing. Its end frees the split communicator."""
    from mpi4py import MPI

    from mpips.runtime.transport.mpi import MPITransport
    from mpips.runtime.transport.protocols import LevelSpec

    comm = MPI.COMM_WORLD
    launched, size = comm.Get_rank(), comm.Get_size()
    backwards = list(reversed(range(size)))
    with MPITransport(comm, warn=30, timeout=60, order=lambda hosts: backwards) as transport:
        assert transport.rank == size - 1 - launched and transport.ranks == [transport.rank]
        assert transport.comm is not comm and transport.comm.Get_rank() == transport.rank
        assert transport.allgather(launched, what="the launched ranks") == backwards
        # a level's windows live on the renumbered ranks: server 0 is launched rank size - 1
        handles = transport.level([LevelSpec(members=tuple(range(size)), servers=(0,), table_rows=size - 1,
                                             slot_rows=tuple(range(size - 1)))], n=4, sparse=False)
        assert list(handles) == [transport.rank]
        placed = transport.comm
    assert placed == MPI.COMM_NULL   # freed by the transport's end
    with MPITransport(comm, warn=30, timeout=60, order=lambda hosts: list(range(len(hosts)))) as transport:
        assert transport.comm is comm and transport.rank == launched


@pytest.mark.mpi(min_size=3)
def test_a_gather_names_the_ranks_whose_value_never_arrived():
    """A checkpoint gathers every rank's state at rank 0 under the role's wait:
    a rank whose state does not come (its link down, it stopped) is named when
    the wait stalls, where a blocking gather could only say that one is missing."""
    from mpi4py import MPI

    from mpips.runtime.transport.mpi import MPITransport
    from mpips.runtime.transport.wait import StallError, wait_until

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()

    def waiting(timeout):
        return lambda ready, missing: wait_until(ready, what="the gather", warn=100, timeout=timeout,
                                                 describe=lambda: ", ".join(f"rank {r}" for r in missing()))
    with MPITransport(comm, warn=30, timeout=60) as transport:
        states = [np.full(50_000, r, np.float32) for r in range(size)]   # past the eager limit: rendezvous
        got = transport.gather(states[rank], waiting(30))
        if rank == 0:
            assert [int(g[0]) for g in got] == list(range(size)) and all(len(g) == 50_000 for g in got)
        else:
            assert got is None
        late = (1, size - 1)
        if rank == 0:
            with pytest.raises(StallError, match=rf"waiting for rank 1, rank {size - 1}$"):
                transport.gather(0, waiting(3.0))   # the others' small values arrive long before
        elif rank not in late:
            transport.gather(rank, waiting(30))
        comm.Barrier()
        # the late ones come now, with everyone's next values: nothing of the first is left over
        got = transport.gather(rank + 100 if rank in late else rank + 200, waiting(30))
        if rank == 0:
            assert got == [200] + [r + 100 if r in late else r + 200 for r in range(1, size)]
        comm.Barrier()
