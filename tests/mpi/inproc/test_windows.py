"""The RMA windows under mpiexec -n 4 (pytest --with-mpi): exact concurrent pushes.

One body runs under COMM_WORLD: rank 0 serves, the others push at once.
"""
from __future__ import annotations

import numpy as np
import pytest

from mpips.windows import ControlTable, ParameterStore

N = 100_003          # not a multiple of anything: uneven shards
K = 40               # pushes per worker


def known_vector(rank: int) -> np.ndarray:
    # Small integers: float32 sums of them are exact, so "exact" means exact.
    return ((np.arange(N) % 7) + rank).astype(np.float32)


@pytest.mark.mpi(min_size=3)
@pytest.mark.parametrize("servers", [1, 2])
def test_concurrent_pushes_sum_exactly(servers):
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    if size - servers < 1:
        pytest.skip("needs a worker")
    store = ParameterStore(comm, list(range(servers)), N)
    workers = range(servers, size)
    total = np.zeros(len(store.shard), np.float32)
    if rank in workers:
        g = known_vector(rank)
        for _ in range(K):
            store.push(g)
    else:
        # Take while pushes land, so takes race with accumulates.
        buf = np.zeros_like(total)
        for _ in range(200):
            store.take_gradient(buf)
            total += buf
    comm.Barrier()
    if rank not in workers:
        buf = np.zeros_like(total)
        store.take_gradient(buf)
        total += buf
        lo, hi = store.bounds[rank]
        expected = sum(K * known_vector(r)[lo:hi] for r in workers)
        np.testing.assert_array_equal(total, expected)
        store.take_gradient(buf)
        assert not buf.any(), "the window is empty after taking everything"
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
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    table = ControlTable(comm, 0, workers=comm.Get_size(), servers=1)
    slot = table.worker_offset(0, 13)
    seen = [table.add(slot, 1.0) for _ in range(100)]
    assert seen == sorted(seen)
    comm.Barrier()
    assert table.read()[slot] == 100 * comm.Get_size()
    comm.Barrier()
    table.free()
