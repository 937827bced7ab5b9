"""The MPI transport (transport.py's protocols): the shared state of a run in
one-sided windows, the collectives, and this rank's role between barriers.
The one module of mpips that imports mpi4py.

Two classes own windows (after mpi4py.util.sync), `ParameterWindows` and
`ControlWindow`, all made with `Win.Allocate` (docs/environment.md:
`Win.Create` does not progress); every rank holds one `Lock_all` epoch on
them for the whole run, completing operations with `Flush`. How the state
is laid out and summed is state.py.
"""
from __future__ import annotations

import sys
import threading
import time
from typing import Any, cast

import numpy as np
from mpi4py import MPI

from ..state import HEAD, Head, SlotRows, TableLayout, shard_bounds, sum_slots
from .protocols import LevelSpec
from .wait import SetupTimeout, StallError, WallClock, wait_until

_UP, _DOWN = 0x6D70, 0x6D71   # allgather_within's tags: to rank 0, from it (nothing else sends on these)
_INFO = {"accumulate_ordering": "none", "same_disp_unit": "true"}


def _allocate(comm: MPI.Intracomm, count: int, dtype) -> tuple[MPI.Win, np.ndarray]:
    """A window of `count` zeroed elements on this rank, collective over comm."""
    itemsize = np.dtype(dtype).itemsize
    info = MPI.Info.Create()
    for k, v in _INFO.items():
        info.Set(k, v)
    win = MPI.Win.Allocate(count * itemsize, itemsize, info, comm)
    info.Free()
    # (mpi4py's buffer has the buffer protocol; numpy's stubs do not know its type)
    mem = np.frombuffer(cast(Any, win.tomemory()), dtype=dtype, count=count) if count else np.zeros(0, dtype)
    mem[:] = 0
    return win, mem




def allgather_within(comm, value, *, what: str, warn: float, timeout: float, name=str) -> list:
    """Every rank's `value`, in rank order, on every rank; SetupTimeout naming
    the ranks that did not arrive within `timeout` seconds (`name(rank)`: how
    to call one).

    Before the run, ranks exchange what each found (a bad input, the shapes
    of its model and data). A blocking `allgather` there waits forever for a
    rank that is stuck in a user's model factory, stopped, or gone its own
    way after an error only it saw. This one gathers at rank 0 by
    point-to-point messages, polled with backoff (wait.py), so rank 0 knows
    which ranks have not arrived and names them after `timeout` seconds;
    every other rank waits for rank 0's answer the same way, longer (so that
    rank 0 names the missing rank first, unless it is the one stuck). A
    SetupTimeout ends the job (an abort: the missing rank cannot take part
    in an orderly exit)."""
    rank, size = comm.Get_rank(), comm.Get_size()
    if size == 1:
        return [value]
    if rank == 0:
        got = {0: value}

        def arrived():
            for r in range(1, size):
                if r not in got:
                    message = comm.improbe(source=r, tag=_UP)
                    if message is not None:
                        got[r] = message.recv()
            return len(got) == size

        def missing():
            return [r for r in range(size) if r not in got]

        def named():
            return "rank(s) " + ", ".join(name(r) for r in missing())

        try:
            wait_until(arrived, what=what, describe=named, warn=warn, timeout=timeout)
        except StallError:
            raise SetupTimeout(f"{what}: {named()} did not arrive within {timeout:g}s "
                               f"(stall_timeout): stuck, stopped or gone", missing()) from None
        everyone = [got[r] for r in range(size)]
        for request in [comm.isend(everyone, dest=r, tag=_DOWN) for r in range(1, size)]:
            request.wait()   # every rank arrived: each is waiting for this
        return everyone
    sent = comm.isend(value, dest=0, tag=_UP)
    answer = []

    def answered():
        message = comm.improbe(source=0, tag=_DOWN)
        if message is not None:
            answer.append(message.recv())
        return bool(answer)

    # Rank 0 names the ranks it misses first; the others speak only if rank 0 itself is stuck.
    patience = 2 * timeout + 10
    try:
        wait_until(answered, what=f"rank {rank}: {what}", describe=lambda: "rank 0", warn=patience, timeout=patience)
    except StallError:
        raise SetupTimeout(f"rank {rank}: {what}: rank 0 did not answer within {patience:g}s "
                           f"(twice the stall_timeout and 10s)") from None
    sent.wait()
    return answer[0]


class ParameterWindows(SlotRows):
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
                 clients=None, sparse: bool = False, reads: bool = False, world_server_ranks=None):
        self.comm = comm
        self.server_ranks = list(server_ranks)
        # for messages: the servers' world ranks (a GSSP group's comm numbers its own)
        self.world_server_ranks = list(world_server_ranks or server_ranks)
        self.n = n
        self.bounds = shard_bounds(n, len(server_ranks))
        if clients is None:
            clients = comm.Get_size() - len(self.server_ranks)
        super().__init__(range(clients) if isinstance(clients, (int, np.integer)) else clients)
        self.sparse = sparse
        rank = comm.Get_rank()
        mine = self.server_ranks.index(rank) if rank in self.server_ranks else None
        count = self.bounds[mine][1] - self.bounds[mine][0] if mine is not None else 0
        self.count = count
        self.shard_index = mine
        slots = len(self.rows) if mine is not None else 0
        self._param_win, self.shard = _allocate(comm, count, np.float32)
        self._grad_win, grad_mem = _allocate(comm, slots * count, np.float32)
        self._slots = grad_mem.reshape(slots, count)
        # with `reads`, per slot the parameters its push was computed on (an async rule's DC)
        self._read_win, read_mem = _allocate(comm, (slots if reads else 0) * count, np.float32)
        self._reads = read_mem.reshape(slots, count) if reads else None
        self._head_win, heads = _allocate(comm, HEAD * slots, np.int64)
        self._heads = heads.reshape(slots, HEAD)    # per slot: state.Head, its scale's bits last
        comm.Barrier()  # every slot is zeroed before anyone can push into it
        for win in self._windows():
            win.Lock_all()
        self._head = np.zeros((len(self.server_ranks), HEAD), np.int64)

    def _windows(self) -> tuple[MPI.Win, ...]:
        return self._param_win, self._grad_win, self._read_win, self._head_win

    @property
    def reads(self) -> bool:
        return self._reads is not None

    # worker side ------------------------------------------------------------
    def pull(self, out: np.ndarray) -> None:
        """Read every shard into `out` (float32, length n)."""
        for rank, (lo, hi) in zip(self.server_ranks, self.bounds):
            if hi > lo:
                self._param_win.Get([out[lo:hi], MPI.FLOAT], rank, (0, hi - lo, MPI.FLOAT))
        self._param_win.Flush_all()

    # an evaluation's read: a Get like any pull (the simulator's takes no virtual time)
    observe = pull

    def push(self, grad: np.ndarray, *, row: int, number: int, key: int = 0, versions=None,
             scale: float = 1.0, read: np.ndarray | None = None) -> None:
        """Put `grad` (float32, length n) into row's slot on every server, as
        its push `number` (the row's clock once this push is counted), to be
        summed in the order of `key`, then of rows; `versions` (per server,
        the pushes it had applied to the parameters the push was computed
        on), `scale` (the factor the worker scaled it by) and `read` (those
        parameters, into a store made with `reads`) for an async rule. The
        slot must be free (every server took the row's earlier pushes)."""
        k = self.slot(row)
        for rank, (lo, hi) in zip(self.server_ranks, self.bounds):
            if hi > lo:
                self._grad_win.Put([grad[lo:hi], MPI.FLOAT], rank, (k * (hi - lo), hi - lo, MPI.FLOAT))
        self._grad_win.Flush_all()
        self._put_read(k, read)
        self._announce(k, number, key, versions, scale)

    def _put_read(self, k: int, read: np.ndarray | None) -> None:
        if read is None:
            return
        for rank, (lo, hi) in zip(self.server_ranks, self.bounds):
            if hi > lo:
                self._read_win.Put([read[lo:hi], MPI.FLOAT], rank, (k * (hi - lo), hi - lo, MPI.FLOAT))
        self._read_win.Flush_all()

    def push_sparse(self, indices: np.ndarray, values: np.ndarray, *, row: int, number: int,
                    key: int = 0, versions=None, scale: float = 1.0, read: np.ndarray | None = None) -> None:
        """Put values at global `indices` (sorted, int) only, into a slot of
        zeros (`sparse=True`): an indexed target datatype sends the k values,
        not a dense vector of zeros."""
        if not self.sparse:
            raise RuntimeError("push_sparse into a ParameterWindows made without sparse=True")
        k = self.slot(row)
        for rank, (lo, hi) in zip(self.server_ranks, self.bounds):
            a, b = np.searchsorted(indices, (lo, hi))
            if b > a:
                local = (indices[a:b] - lo + k * (hi - lo)).astype(np.int32)
                dtype = MPI.FLOAT.Create_indexed_block(1, local.tolist()).Commit()
                self._grad_win.Put([np.ascontiguousarray(values[a:b], np.float32), MPI.FLOAT],
                                   rank, (0, 1, dtype))
                self._grad_win.Flush(rank)
                dtype.Free()
        self._put_read(k, read)
        self._announce(k, number, key, versions, scale)

    def _announce(self, k: int, number: int, key: int, versions, scale: float) -> None:
        """The slot's head, after its data is complete at every server (a
        server sums a slot only when its number is the row's clock); each
        server's its own version."""
        heads = self._head   # one per server: the Puts are in flight together
        heads[:, 0], heads[:, 1] = number, key
        heads[:, 2] = 0 if versions is None else versions
        heads[:, 3] = np.array([scale], np.float64).view(np.int64)[0]
        for s, rank in enumerate(self.server_ranks):
            self._head_win.Put([heads[s], MPI.INT64_T], rank, (HEAD * k, HEAD, MPI.INT64_T))
        self._head_win.Flush_all()

    # server side ------------------------------------------------------------
    def take_gradient(self, out: np.ndarray, clocks, consumed, each=None) -> int:
        """state.sum_slots of this server's slots; called with the clocks
        read after the pushes were flushed (a client ticks after pushing)."""
        if not self.count:
            return 0
        self._head_win.Sync()
        self._grad_win.Sync()
        heads: Any = self._heads
        if each is not None:   # the heads as state.Head, their scales from their bits
            self._read_win.Sync()
            scales = self._heads[:, 3].copy().view(np.float64).tolist()
            heads = [Head(n, key, v, sc) for (n, key, v, _), sc in zip(self._heads.tolist(), scales)]
        summed = sum_slots(out, self._slots, heads, self._slot_of, clocks, consumed,
                           sparse=self.sparse, each=each, reads=self._reads)
        if self.sparse:
            self._grad_win.Sync()
        return summed

    def publish(self) -> None:
        """Make local writes to `shard` visible to remote Gets."""
        self._param_win.Sync()

    def pending(self) -> dict:
        """A copy of the slots and their heads (a server's slots hold what
        was pushed to it and not taken yet), and of the read parameters
        with them (a store with `reads`). For a checkpoint, taken while no
        push is in flight."""
        for win in self._windows():
            win.Sync()
        state = {"slots": self._slots.copy(), "heads": self._heads.copy()}
        if self._reads is not None:
            state["reads"] = self._reads.copy()
        return state

    def restore_pending(self, state: dict) -> None:
        """Put back `pending()` of a checkpoint, before anyone pushes."""
        if not isinstance(state, dict) or not {"slots", "heads"} <= set(state) <= {"slots", "heads", "reads"}:
            raise ValueError("the checkpoint's pending gradient is not per-worker slots "
                             "(written by an mpips before exact pushes): start the run afresh")
        if ("reads" in state) != (self._reads is not None):
            raise ValueError("the checkpoint was made with another async_rule (DC's pushes carry the "
                             "parameters they were read at): resume with the one it was made with")
        self._slots[:] = state["slots"]
        heads = np.asarray(state["heads"])
        self._heads[:, :heads.shape[1]] = heads
        if heads.shape[1] < HEAD:   # (older checkpoints: number and key only)
            self._heads[:, 2] = 0
            self._heads[:, 3] = np.array([1.0]).view(np.int64)[0]
        if self._reads is not None:
            self._reads[:] = state["reads"]
        for win in self._windows():
            win.Sync()

    def free(self) -> None:
        for win in self._windows():
            win.Unlock_all()
            win.Free()


class ControlWindow(TableLayout):
    """Per-worker and per-server counters in one float64 window on server 0.

    Each slot has one writer (a worker its row, a server its row), so writes
    are plain `Accumulate(REPLACE)` without locks; readers take the whole
    table with one `Get` (a few hundred bytes).
    """

    def __init__(self, comm: MPI.Intracomm, home: int, workers: int, servers: int):
        super().__init__(workers, servers)
        self.comm = comm
        self.home = home
        count = self.size if comm.Get_rank() == home else 0
        self._win, _ = _allocate(comm, count, np.float64)
        comm.Barrier()
        self._win.Lock_all()
        self._one = np.zeros(1)

    def read(self) -> np.ndarray:
        """One consistent-enough copy of the whole table (each slot atomic)."""
        self._win.Get([self.latest, MPI.DOUBLE], self.home, (0, self.size, MPI.DOUBLE))
        self._win.Flush(self.home)
        return self.latest.copy()

    def read_cells(self, offsets: list[int]) -> np.ndarray:
        """A few cells, one Get each (a worker reads its servers' counts
        after every pull: not the whole table of a large job)."""
        out = np.empty(len(offsets))
        for k, offset in enumerate(offsets):
            self._win.Get([out[k:k + 1], MPI.DOUBLE], self.home, (offset, 1, MPI.DOUBLE))
        self._win.Flush(self.home)
        return out

    def is_home(self) -> bool:
        return self.comm.Get_rank() == self.home

    def gate_answered(self, view, gate) -> None:
        pass   # a wait polls: nothing to learn

    def write(self, offset: int, values) -> None:
        vals = np.ascontiguousarray(values, dtype=np.float64).reshape(-1)
        self._win.Accumulate([vals, MPI.DOUBLE], self.home, (offset, len(vals), MPI.DOUBLE), MPI.REPLACE)
        self._win.Flush(self.home)

    def add(self, offset: int, value: float) -> float:
        """Atomic fetch-and-add; returns the value before. For counters that
        only their adders read (the global budget's claims): no wait's
        condition may read one, since the simulator does not check waits
        again when it changes (local_transport.LocalControlTable.add)."""
        self._one[0] = value
        result = np.zeros(1)
        self._win.Fetch_and_op([self._one, MPI.DOUBLE], [result, MPI.DOUBLE], self.home, offset, MPI.SUM)
        self._win.Flush(self.home)
        return float(result[0])

    def free(self) -> None:
        self._win.Unlock_all()
        self._win.Free()


class MPITransport:
    """transport.Transport and transport.Collectives of this rank of `comm`
    (COMM_WORLD by default); a wait of a collective warns after `warn`
    seconds and fails after `timeout` (the configuration's stall_*).

    MPI's own collectives (a window's allocation, a split, a broadcast, a
    barrier) block until every rank is in them: a rank stopped (SIGSTOP, a
    node swapping) before one, or inside it, held every other rank there
    beyond any wait of ours, and a job with a rank stopped in its first
    seconds hung, silent, until it was killed from outside. Each is made
    through `blocking`, which ends the job past the stall timeout."""

    def __init__(self, comm: MPI.Intracomm | None, *, warn: float, timeout: float):
        self.comm = MPI.COMM_WORLD if comm is None else comm
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        self.ranks = [self.rank]
        self.clock = WallClock()
        self.warn, self.timeout = warn, timeout
        self.started = False         # the run's clock started (run): a stuck collective is then exit 1, not 2
        self._made: list = []        # windows and communicators, freed by close()
        # one cell on rank 0 counting the ranks that failed alone (first_to_fail)
        self._failures = self.blocking("set-up (a window's allocation)", lambda: ControlWindow(self.comm, 0, 0, 0))

    def blocking(self, what: str, call):
        """call(), one of MPI's blocking collectives. Past the stall timeout
        rank 0 says where the job is stuck and aborts it; the other ranks
        wait twice as long and 10 s more, and speak only if rank 0 is the
        one stopped (the ranks missing from a collective are not known: the
        point-to-point exchanges before it name those that never arrive)."""
        patience = self.timeout if self.rank == 0 else 2 * self.timeout + 10
        timer = threading.Timer(patience, self._stuck, (what, patience))
        timer.daemon = True
        timer.start()
        try:
            return call()
        finally:
            timer.cancel()

    def _stuck(self, what: str, patience: float) -> None:
        print(f"mpips: error: rank {self.rank}: {what} did not complete within {patience:g}s (stall_timeout): "
              f"a rank is stuck, stopped or gone", file=sys.stderr, flush=True)
        self.comm.Abort(1 if self.started else 2)

    def allgather(self, value, *, what: str, name=str) -> list:
        return allgather_within(self.comm, value, what=what, warn=self.warn, timeout=self.timeout, name=name)

    def bcast(self, value, root: int = 0):
        return self.blocking("a broadcast", lambda: self.comm.bcast(value, root=root))

    def gather(self, value, root: int = 0):
        return self.blocking("a gather", lambda: self.comm.gather(value, root=root))

    def scatter(self, values, root: int = 0):
        return self.blocking("a scatter", lambda: self.comm.scatter(values, root=root))

    def barrier(self, wait) -> None:
        wait(self.comm.Ibarrier().Test)

    @staticmethod
    def library() -> str:
        return MPI.Get_library_version().replace("\x00", "").splitlines()[0].strip()

    def on_this_node(self, value) -> tuple[list, int]:
        """Every value of this node's ranks, and this rank's place among them."""
        def exchange():
            local = self.comm.Split_type(MPI.COMM_TYPE_SHARED)
            values, mine = local.allgather(value), local.Get_rank()
            local.Free()
            return values, mine
        return self.blocking("set-up (the ranks of each node)", exchange)

    def level(self, specs: list[LevelSpec], *, n: int, sparse: bool, reads: bool = False) -> dict:
        return self.blocking("set-up (the windows' allocation)",
                             lambda: self._level(specs, n=n, sparse=sparse, reads=reads))

    def _level(self, specs: list[LevelSpec], *, n: int, sparse: bool, reads: bool) -> dict:
        rank = self.rank
        mine = [k for k, spec in enumerate(specs) if rank in spec.members]
        if len(specs) == 1 and len(specs[0].members) == self.size:
            comm = self.comm      # the global level: every rank
        else:   # one communicator per level, its servers first
            # (an intracommunicator's split is one; mpi4py's stubs say Comm)
            comm = cast(MPI.Intracomm, self.comm.Split(mine[0] if mine else MPI.UNDEFINED,
                                                       specs[mine[0]].members.index(rank) if mine else rank))
            if not mine:
                return {}
            self._made.append(comm)
        spec = specs[mine[0]]
        local = [spec.members.index(r) for r in spec.servers]
        store = ParameterWindows(comm, local, n, clients=list(spec.slot_rows), sparse=sparse, reads=reads,
                                 world_server_ranks=spec.servers)
        table = ControlWindow(comm, local[0], spec.table_rows, len(spec.servers))
        self._made += [store, table]
        return {rank: (store, table)}

    def each(self, work: dict) -> np.ndarray:
        mine = work[self.rank]() if work else np.nan
        return np.array(self.allgather(mine, what="set-up (every rank's work before the start)"))

    def run(self, bodies: dict, elapsed: float, name=str) -> dict:
        """The body between the start barrier and the end one (SetupTimeout
        naming the ranks that do not reach it)."""
        (rank, body), = bodies.items()
        self.blocking("the start of the run", self.comm.Barrier)   # parameters in place, every role ready
        # the clock starts (a resumed job's goes on from the checkpoint's training time)
        self.clock.origin = self.bcast(time.time() - elapsed if rank == 0 else None)
        self.started = True
        result = body()
        self.allgather(None, what="the end of the run", name=name)
        return {rank: result}

    def total(self, counts: np.ndarray) -> np.ndarray:
        return self.blocking("the run's totals", lambda: self.comm.allreduce(counts))

    def first_to_fail(self) -> bool:
        """Whether no rank asked before (a fetch-and-add): of ranks that fail
        at once (a full disk), one says why."""
        return self._failures.add(0, 1) == 0

    def close(self) -> None:
        """Free the levels' windows and communicators, the last made first."""
        def free():
            for made in reversed(self._made + [self._failures]):
                made.free() if hasattr(made, "free") else made.Free()
        self.blocking("freeing the windows", free)
        self._made = []
