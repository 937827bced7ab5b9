"""The shared state of a run, in one-sided MPI windows.

Two classes, each owning its windows (after mpi4py.util.sync): the
`ParameterStore` (the flat float32 parameters, sharded over the servers, and
on each server one gradient slot per worker that the worker `Put`s into) and the
`ControlTable` (a small float64 table on server 0 of per-worker and
per-server counters). All windows are made with `Win.Allocate` (ENVIRONMENT.md:
`Win.Create` does not progress) and every rank holds one `Lock_all` epoch on
them for the whole run, completing operations with `Flush`.
"""
from __future__ import annotations

from enum import IntEnum

import numpy as np
from mpi4py import MPI

from .paradigms.base import SLOT_MODE, SLOT_MODE_CLOCK, ClusterView
from .vsgd import norm_of_shards

_INFO = {"accumulate_ordering": "none", "same_disp_unit": "true"}


def _allocate(comm: MPI.Intracomm, count: int, dtype) -> tuple[MPI.Win, np.ndarray]:
    """A window of `count` zeroed elements on this rank, collective over comm."""
    itemsize = np.dtype(dtype).itemsize
    info = MPI.Info.Create()
    for k, v in _INFO.items():
        info.Set(k, v)
    win = MPI.Win.Allocate(count * itemsize, itemsize, info, comm)
    info.Free()
    mem = np.frombuffer(win.tomemory(), dtype=dtype, count=count) if count else np.zeros(0, dtype)
    mem[:] = 0
    return win, mem


def shard_bounds(n: int, servers: int) -> list[tuple[int, int]]:
    """Even contiguous split of n parameters over the servers."""
    edges = np.linspace(0, n, servers + 1).round().astype(np.int64)
    return [(int(edges[s]), int(edges[s + 1])) for s in range(servers)]


class ParameterStore:
    """The flat parameter vector, sharded; pull with `Get`, push with `Put`
    into the pusher's own gradient slot.

    Collective over `comm`: every rank constructs it; only ranks in
    `server_ranks` hold memory. Each server holds one gradient slot per
    client row (`clients`: a count, or the row numbers that push, in order)
    and a push number per slot. A client `push`es into its slot with `Put`
    (no accumulate, no lock shared with other clients), then writes the
    slot's push number and order key; a server `take_gradient`s by summing
    the slots that hold unapplied pushes in the order of their keys (a
    worker's key is where its batch starts in the global sample stream:
    which worker claimed which batch of a BSP round depends on timing, the
    set of batches does not), then of their rows, so a sum never depends on
    arrival order (a BSP round is bit-reproducible) and taking is exact
    (no (x + g) - x). A slot holds one push: before pushing again a client
    waits until every server has taken its earlier pushes
    (`Context.wait_for_slot`); that is the flow control of asynchronous
    paradigms, and memory stays at one shard per client per server.

    `sparse`: clients may `push_sparse` (top-k): a server then zeroes each
    slot after taking it, so a sparse `Put` lands on zeros.
    """

    def __init__(self, comm: MPI.Intracomm, server_ranks: list[int], n: int, *,
                 clients=None, sparse: bool = False):
        self.comm = comm
        self.server_ranks = list(server_ranks)
        self.n = n
        self.bounds = shard_bounds(n, len(server_ranks))
        if clients is None:
            clients = comm.Get_size() - len(self.server_ranks)
        self.rows = list(range(clients)) if isinstance(clients, (int, np.integer)) else [int(r) for r in clients]
        self._slot_of = {row: k for k, row in enumerate(self.rows)}
        self.sparse = sparse
        rank = comm.Get_rank()
        mine = self.server_ranks.index(rank) if rank in self.server_ranks else None
        count = self.bounds[mine][1] - self.bounds[mine][0] if mine is not None else 0
        self.count = count
        slots = len(self.rows) if mine is not None else 0
        self.shard_index = mine
        self._param_win, self.shard = _allocate(comm, count, np.float32)
        self._grad_win, grad_mem = _allocate(comm, slots * count, np.float32)
        self._slots = grad_mem.reshape(slots, count)
        self._head_win, heads = _allocate(comm, 2 * slots, np.int64)
        self._heads = heads.reshape(slots, 2)    # per slot: push number, order key
        comm.Barrier()  # every slot is zeroed before anyone can push into it
        for win in (self._param_win, self._grad_win, self._head_win):
            win.Lock_all()
        self._head = np.zeros(2, np.int64)

    def slot(self, row: int) -> int:
        try:
            return self._slot_of[row]
        except KeyError:
            raise ValueError(f"row {row} has no gradient slot (slots for rows {self.rows})") from None

    # worker side ------------------------------------------------------------
    def pull(self, out: np.ndarray) -> None:
        """Read every shard into `out` (float32, length n)."""
        for rank, (lo, hi) in zip(self.server_ranks, self.bounds):
            if hi > lo:
                self._param_win.Get([out[lo:hi], MPI.FLOAT], rank, (0, hi - lo, MPI.FLOAT))
        self._param_win.Flush_all()

    def push(self, grad: np.ndarray, *, row: int, number: int, key: int = 0) -> None:
        """Put `grad` (float32, length n) into row's slot on every server, as
        its push `number` (the row's clock once this push is counted), to be
        summed in the order of `key`, then of rows. The slot must be free
        (every server took the row's earlier pushes)."""
        k = self.slot(row)
        for rank, (lo, hi) in zip(self.server_ranks, self.bounds):
            if hi > lo:
                self._grad_win.Put([grad[lo:hi], MPI.FLOAT], rank, (k * (hi - lo), hi - lo, MPI.FLOAT))
        self._grad_win.Flush_all()
        self._announce(k, number, key)

    def push_sparse(self, indices: np.ndarray, values: np.ndarray, *, row: int, number: int,
                    key: int = 0) -> None:
        """Put values at global `indices` (sorted, int) only, into a slot of
        zeros (`sparse=True`): an indexed target datatype sends the k values,
        not a dense vector of zeros."""
        if not self.sparse:
            raise RuntimeError("push_sparse into a ParameterStore made without sparse=True")
        k = self.slot(row)
        for rank, (lo, hi) in zip(self.server_ranks, self.bounds):
            a, b = np.searchsorted(indices, (lo, hi))
            if b > a:
                local = (indices[a:b] - lo + k * (hi - lo)).astype(np.int32)
                dtype = MPI.FLOAT.Create_indexed_block(1, local).Commit()
                self._grad_win.Put([np.ascontiguousarray(values[a:b], np.float32), MPI.FLOAT],
                                   rank, (0, 1, dtype))
                self._grad_win.Flush(rank)
                dtype.Free()
        self._announce(k, number, key)

    def _announce(self, k: int, number: int, key: int) -> None:
        """The slot's push number and key, after its data is complete at
        every server (a server sums a slot only when its number is the row's clock)."""
        self._head[:] = number, key
        for rank in self.server_ranks:
            self._head_win.Put([self._head, MPI.INT64_T], rank, (2 * k, 2, MPI.INT64_T))
        self._head_win.Flush_all()

    # server side ------------------------------------------------------------
    def take_gradient(self, out: np.ndarray, clocks, consumed) -> int:
        """Sum into `out` the pushes counted in `clocks` and not in `consumed`
        (per row of the control table), in the order of their keys, then
        rows; returns how many.

        A row's slot holds its latest push, numbered with the clock that
        counts it (a worker's clock counts pushes; a GSSP group server's
        counts the worker pushes a delta carries). A counted push whose slot
        does not hold its number was never written (rejected, NaN/Inf) and
        adds nothing. Called with the clocks read after the pushes were
        flushed (a client ticks after pushing).
        """
        if not self.count:
            return 0
        self._head_win.Sync()
        self._grad_win.Sync()
        written = []
        for row in np.flatnonzero(np.asarray(clocks) > np.asarray(consumed)):
            k = self.slot(int(row))
            number, key = self._heads[k]
            if number == int(clocks[row]):   # else rejected: never written
                written.append((int(key), int(row), k))
        written.sort()
        summed = 0
        for _, _, k in written:
            if summed:
                np.add(out, self._slots[k], out=out)
            else:
                np.copyto(out, self._slots[k])
            summed += 1
            if self.sparse:
                self._slots[k] = 0
        if not summed:
            out[:] = 0
        if self.sparse:
            self._grad_win.Sync()
        return summed

    def publish(self) -> None:
        """Make local writes to `shard` visible to remote Gets."""
        self._param_win.Sync()

    def pending(self) -> dict:
        """A copy of the slots and their push numbers (a server's slots hold
        what was pushed to it and not taken yet). For a checkpoint, taken
        while no push is in flight."""
        self._grad_win.Sync()
        self._head_win.Sync()
        return {"slots": self._slots.copy(), "heads": self._heads.copy()}

    def restore_pending(self, state: dict) -> None:
        """Put back `pending()` of a checkpoint, before anyone pushes."""
        if not isinstance(state, dict) or set(state) != {"slots", "heads"}:
            raise ValueError("the checkpoint's pending gradient is not per-worker slots "
                             "(written by an mpips before exact pushes): start the run afresh")
        self._slots[:] = state["slots"]
        self._heads[:] = state["heads"]
        self._grad_win.Sync()
        self._head_win.Sync()

    def free(self) -> None:
        for win in (self._param_win, self._grad_win, self._head_win):
            win.Unlock_all()
            win.Free()


class W(IntEnum):
    """Columns of a worker's row in the control table."""

    CLOCK = 0        # pushes completed (the push counter servers watch)
    PUSH_T0 = 1      # time of the latest push
    PUSH_T1 = 2      # time of the previous push
    ITER_TIME = 3    # busy time (pull + compute + push) of the last iteration
    BATCH = 4        # batch size of the last push
    DONE = 5         # 1 after the last push
    REJECTED = 6     # pushes rejected (NaN/Inf)
    WAIT_TOTAL = 7   # seconds spent waiting at gates
    ELAPSED = 8      # seconds since start at the last tick
    SAMPLES = 9      # samples pushed in total
    EXTRA0 = 10      # paradigm-specific (e.g. DSSP credit, LB-BSP prediction)
    EXTRA1 = 11
    EXTRA2 = 12
    EXTRA3 = 13
    HALTED = 14      # the last checkpoint request this worker stopped for (mpips/checkpointer.py)


class S(IntEnum):
    """Columns of a server's row (followed by W per-worker applied counts)."""

    PUSHES = 0       # pushes applied
    STEPS = 1        # optimizer steps taken
    PATH = 2         # sum of norms of applied updates
    NORM_EMA = 3     # EMA of one update's norm
    DONE = 4
    EXTRA0 = 5
    EXTRA1 = 6
    EXTRA2 = 7
    BEGUN = 8        # steps begun: > STEPS while a step writes the parameters (VSGD exact)
    HALTED = 9       # the last checkpoint request this server stopped for (mpips/checkpointer.py)


class G(IntEnum):
    """Global slots at the start of the table."""

    MODE = SLOT_MODE              # Sync-Switch: MODE_BSP / MODE_ASP
    MODE_CLOCK = SLOT_MODE_CLOCK  # clock at which MODE takes effect (-1: being decided)
    EXTRA0 = 2
    EXTRA1 = 3
    # Coordinated checkpoints (mpips/checkpointer.py), written by server 0:
    CHECKPOINT = 4       # number of the latest checkpoint requested (0: none yet)
    CHECKPOINT_GO = 5    # n: every rank stopped for checkpoint n, save it; -n: cancelled
    CHECKPOINT_EXIT = 6  # n: the job ends after checkpoint n (preemption)
    CLAIMED = 7          # samples of the global budget claimed so far (mpips/budget.py)


_NG, _NW, _NS = 8, 16, len(S)


class ControlTable:
    """Per-worker and per-server counters in one float64 window on server 0.

    Each slot has one writer (a worker its row, a server its row), so writes
    are plain `Accumulate(REPLACE)` without locks; readers take the whole
    table with one `Get` (a few hundred bytes).
    """

    def __init__(self, comm: MPI.Intracomm, home: int, workers: int, servers: int):
        self.comm = comm
        self.home = home
        self.workers = workers
        self.servers = servers
        self.size = _NG + workers * _NW + servers * (_NS + workers)
        count = self.size if comm.Get_rank() == home else 0
        self._win, _ = _allocate(comm, count, np.float64)
        comm.Barrier()
        self._win.Lock_all()
        self._snap = np.zeros(self.size)
        self._one = np.zeros(1)

    @property
    def latest(self) -> np.ndarray:
        """The table as of the last `read()` (no copy, no communication)."""
        return self._snap

    def worker_offset(self, worker: int, col: int = 0) -> int:
        return _NG + worker * _NW + col

    def server_offset(self, server: int, col: int = 0) -> int:
        return _NG + self.workers * _NW + server * (_NS + self.workers) + col

    def read(self) -> np.ndarray:
        """One consistent-enough copy of the whole table (each slot atomic)."""
        self._win.Get([self._snap, MPI.DOUBLE], self.home, (0, self.size, MPI.DOUBLE))
        self._win.Flush(self.home)
        return self._snap.copy()

    def write(self, offset: int, values) -> None:
        vals = np.ascontiguousarray(values, dtype=np.float64).reshape(-1)
        self._win.Accumulate([vals, MPI.DOUBLE], self.home, (offset, len(vals), MPI.DOUBLE), MPI.REPLACE)
        self._win.Flush(self.home)

    def add(self, offset: int, value: float) -> float:
        """Atomic fetch-and-add; returns the value before."""
        self._one[0] = value
        result = np.zeros(1)
        self._win.Fetch_and_op([self._one, MPI.DOUBLE], [result, MPI.DOUBLE], self.home, offset, MPI.SUM)
        self._win.Flush(self.home)
        return float(result[0])

    # views of a snapshot --------------------------------------------------
    def worker_rows(self, snap: np.ndarray) -> np.ndarray:
        return snap[_NG:_NG + self.workers * _NW].reshape(self.workers, _NW)

    def server_rows(self, snap: np.ndarray) -> np.ndarray:
        start = self.server_offset(0)
        return snap[start:start + self.servers * (_NS + self.workers)].reshape(
            self.servers, _NS + self.workers)

    def free(self) -> None:
        self._win.Unlock_all()
        self._win.Free()

    def view(self, snap: np.ndarray, now: float) -> "TableView":
        """The paradigms' read-only `ClusterView` of a snapshot."""
        return TableView(self, snap, now)


class _lazy:
    """A field computed on first read, then kept (functools.cached_property
    without its lock: a view belongs to one thread)."""

    def __init__(self, compute):
        self.compute = compute
        self.name = compute.__name__

    def __get__(self, view, owner=None):
        if view is None:
            return self
        value = view.__dict__[self.name] = self.compute(view)
        return value


_CLOCK, _DONE = int(W.CLOCK), int(W.DONE)   # plain ints: IntEnum arithmetic is slow


class TableView(ClusterView):
    """A `ClusterView` of a control-table snapshot, each field computed on
    first use: a worker polls its gate every few microseconds while it waits,
    and a gate reads two or three fields of the fourteen
    (benchmarks/control_plane.py). The gates' fields are strided slices of the
    snapshot, converted once."""

    def __init__(self, table: ControlTable, snap: np.ndarray, now: float):
        self.now = now
        self._snap = snap
        self._table = table
        self._rows_end = _NG + table.workers * _NW

    @_lazy
    def clocks(self) -> np.ndarray:
        return self._snap[_NG + _CLOCK:self._rows_end:_NW].astype(np.int64)

    @_lazy
    def done(self) -> np.ndarray:
        return self._snap[_NG + _DONE:self._rows_end:_NW].astype(bool)   # written as 0 or 1

    @_lazy
    def applied(self) -> np.ndarray:
        return self._applied().astype(np.int64)

    def _applied(self) -> np.ndarray:
        table = self._table
        if table.servers == 1:
            lo = table.server_offset(0, _NS)
            return self._snap[lo:lo + table.workers]
        return self._s[:, _NS:].min(axis=0)

    def clock(self, worker: int) -> int:
        return int(self._snap[_NG + worker * _NW + _CLOCK])

    def progress(self) -> tuple[list, list, list]:
        return self._progress

    @_lazy
    def _progress(self) -> tuple[list, list, list]:
        # straight from the snapshot, once per view (a server's poll reads it
        # twice): no numpy arrays made (floats holding integers)
        snap, end = self._snap, self._rows_end
        return (snap[_NG + _CLOCK:end:_NW].tolist(), self._applied().tolist(),
                snap[_NG + _DONE:end:_NW].tolist())

    @_lazy
    def rejected(self) -> np.ndarray:
        """(W,) pushes each worker counted in its clock but rejected (NaN/Inf): nothing was sent."""
        return self._w[:, W.REJECTED].astype(np.int64)

    @_lazy
    def _w(self) -> np.ndarray:
        return self._table.worker_rows(self._snap)

    @_lazy
    def _s(self) -> np.ndarray:
        return self._table.server_rows(self._snap)

    @_lazy
    def updates(self) -> int:
        return int(self._s[:, S.PUSHES].min())

    @_lazy
    def path_length(self) -> float:
        return float(self._s[:, S.PATH].sum())

    @_lazy
    def update_norm_ema(self) -> float:
        return norm_of_shards(self._s[:, S.NORM_EMA])

    @_lazy
    def push_times(self) -> np.ndarray:
        t = self._w[:, W.PUSH_T0:W.PUSH_T1 + 1]  # adjacent columns: a slice, not a list-index copy
        return np.where(t > 0, t, np.nan)

    @_lazy
    def iter_times(self) -> np.ndarray:
        t = self._w[:, W.ITER_TIME]
        return np.where(t > 0, t, np.nan)

    @_lazy
    def batch_sizes(self) -> np.ndarray:
        return self._w[:, W.BATCH].astype(np.int64)

    @_lazy
    def mode(self) -> int:
        return int(self._snap[SLOT_MODE])

    @_lazy
    def mode_clock(self) -> int:
        return int(self._snap[SLOT_MODE_CLOCK])

    @_lazy
    def extras(self) -> np.ndarray:
        return self._w[:, W.EXTRA0:W.EXTRA3 + 1].copy()

    @_lazy
    def slots(self) -> tuple[float, float]:
        return float(self._snap[G.EXTRA0]), float(self._snap[G.EXTRA1])

    @property
    def num_workers(self) -> int:
        return self._table.workers
