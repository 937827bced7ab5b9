"""The MPI transport (transport.py's protocols): the shared state of a run in
one-sided windows, the collectives, and this rank's role between barriers.
The one module of mpips that imports mpi4py.

Two classes own windows (after mpi4py.util.sync), `ParameterWindows` and
`ControlWindow`, all made with `Win.Allocate` (docs/environment.md:
`Win.Create` does not progress); every rank holds one `Lock_all` epoch on
them for the whole run, completing operations with `Flush`. Each is a
context manager whose `free()` (collective) ends it: a later use is a
`Freed` error naming it, not a call on a freed MPI handle. How the state is
laid out and summed is state.py.
"""
from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any, Callable, cast

import numpy as np
from mpi4py import MPI

from ...config import ConfigError
from ..state import HEAD, G, SlotRows, TableLayout, head_cells, heads_of, shard_bounds, sum_slots
from .protocols import EveryRank, LevelHandles, LevelSpec
from .wait import SetupTimeout, StallError, WallClock, wait_until

_UP, _DOWN = 0x6D70, 0x6D71   # allgather_within's tags: to rank 0, from it (nothing else sends on these)
_GATHER = 0x6D72              # MPITransport.gather's
# acc_single_intrinsic: every accumulate of mpips is a one-element Fetch_and_op
# (ControlWindow.add), so Open MPI may use the network's atomics without its
# accumulate lock (ControlWindow says why that lock must not be taken)
_INFO = {"accumulate_ordering": "none", "same_disp_unit": "true", "acc_single_intrinsic": "true"}


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




class Freed(RuntimeError):
    """A window (or the transport) used after it was freed."""


class _Gone:
    """Stands for a freed window: any use is a Freed error naming its owner."""

    def __init__(self, owner: str):
        self.owner = owner

    def __getattr__(self, name: str):
        raise Freed(f"{self.owner} used after free() ({name})")


class _Windows:
    """Owns windows (`_wins`: attribute names): `free()` unlocks and frees
    them, collectively, once; after it each name is a `_Gone`."""

    _wins: tuple[str, ...] = ()

    def free(self) -> None:
        for name in self._wins:
            win = getattr(self, name)
            if not isinstance(win, _Gone):
                win.Unlock_all()
                win.Free()
                setattr(self, name, _Gone(type(self).__name__))

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.free()


def allgather_within(comm, value, *, what: str, warn: float, timeout: float, name: Callable[[int], str] = str) -> list:
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


class Unwatched:
    """The watchdog of windows made outside a job (tests, benchmarks): none."""

    def begin(self, what: str, targets: tuple[int, ...]) -> None:
        pass

    def end(self) -> None:
        pass


UNWATCHED = Unwatched()


class Watchdog(Unwatched):
    """Ends the job when one of this rank's one-sided operations has not
    completed within the stall timeout. A Get or a Flush aimed at a node
    that is gone, or behind a link that is down with every process alive,
    blocks inside MPI, where no wait of ours can time it out (TCP gives up
    after many minutes). Each operation is `begin` ... `end` (two stores);
    a thread looks once a second. Past the timeout it runs `before_abort`
    (the rank's log flushed: the rank is inside MPI, not writing it), says
    which operation waited on which ranks and hosts, and calls `abort`."""

    def __init__(self, timeout: float, name: Callable[[int], str], abort: Callable[[], object], *,
                 me: Callable[[], str]):
        self.timeout, self._name, self._abort, self._me = timeout, name, abort, me
        self.before_abort: list = []
        self._since, self._what = 0.0, ""
        self._targets: tuple[int, ...] = ()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mpips-watchdog", daemon=True)
        self._thread.start()

    def begin(self, what: str, targets: tuple[int, ...]) -> None:
        self._what, self._targets = what, targets
        self._since = time.monotonic()

    def end(self) -> None:
        self._since = 0.0

    def _run(self) -> None:
        while not self._stop.wait(min(1.0, self.timeout / 10)):
            since = self._since
            if since and time.monotonic() - since > self.timeout:
                for hook in self.before_abort:
                    try:
                        hook()
                    except Exception:  # noqa: BLE001 - the job ends whatever a hook met
                        pass
                print(f"mpips: error: {self._me()}: {self._what} on {', '.join(map(self._name, self._targets))} "
                      f"did not complete within {self.timeout:g}s (stall_timeout): a node or the network "
                      f"to it is lost", file=sys.stderr, flush=True)
                self._abort()

    def free(self) -> None:
        self._stop.set()
        self._thread.join()


class ParameterWindows(SlotRows, _Windows):
    """The flat parameter vector, sharded; pull with `Get`, push with `Put`
    into the pusher's own gradient slot.

    Collective over `comm`: every rank constructs it; only ranks in
    `server_ranks` hold memory. Each server holds one gradient slot per
    client row (`clients`: a count, or the row numbers that push, in order)
    and a head per slot (state.Head). A client `push`es into its slot with `Put`
    (no accumulate, no lock shared with other clients), then writes the
    slot's head (push number, order key, and an async rule's version read
    and scale); a server `take_gradient`s by summing
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
    slot after taking it, so a sparse `Put` lands on zeros. `reads`: one
    more slot per client for the parameters its push was computed on (the
    DC rules' w_read; docs/paradigms.md, "Update rules").
    """

    _wins = ("_param_win", "_grad_win", "_read_win", "_head_win")

    def __init__(self, comm: MPI.Intracomm, server_ranks: list[int], n: int, *,
                 clients=None, sparse: bool = False, reads: bool = False, world_server_ranks=None,
                 watchdog: Unwatched = UNWATCHED):
        self.comm = comm
        self._watch = watchdog
        self.server_ranks = list(server_ranks)
        # for messages: the servers' world ranks (a GSSP group's comm numbers its own)
        self.world_server_ranks = list(world_server_ranks or server_ranks)
        self.n = n
        self.bounds = shard_bounds(n, len(server_ranks))
        if clients is None:
            clients = comm.Get_size() - len(self.server_ranks)
        super().__init__(range(clients) if isinstance(clients, (int, np.integer)) else clients)
        self.sparse = sparse
        self._servers = tuple(self.world_server_ranks)
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
        for name in self._wins:
            getattr(self, name).Lock_all()
        self._head = np.zeros((len(self.server_ranks), HEAD), np.int64)

    @property
    def reads(self) -> bool:
        return self._reads is not None

    # worker side ------------------------------------------------------------
    def pull(self, out: np.ndarray) -> None:
        """Read every shard into `out` (float32, length n)."""
        self._watch.begin("a pull of the parameters", self._servers)
        for rank, (lo, hi) in zip(self.server_ranks, self.bounds):
            if hi > lo:
                self._param_win.Get([out[lo:hi], MPI.FLOAT], rank, (0, hi - lo, MPI.FLOAT))
        self._param_win.Flush_all()
        self._watch.end()

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
        self._watch.begin("a push of a gradient", self._servers)
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
        not a dense vector of zeros. `read` goes at the same indices only: DC's
        correction is zero wherever the push is (async_rules.AsyncRule.apply),
        so the read slot's other cells, left from earlier pushes, count for
        nothing."""
        if not self.sparse:
            raise RuntimeError("push_sparse into a ParameterWindows made without sparse=True")
        k = self.slot(row)
        self._watch.begin("a push of a sparse gradient", self._servers)
        for rank, (lo, hi) in zip(self.server_ranks, self.bounds):
            a, b = np.searchsorted(indices, (lo, hi))
            if b > a:
                local = (indices[a:b] - lo + k * (hi - lo)).astype(np.int32)
                dtype = MPI.FLOAT.Create_indexed_block(1, local.tolist()).Commit()
                try:
                    self._grad_win.Put([np.ascontiguousarray(values[a:b], np.float32), MPI.FLOAT],
                                       rank, (0, 1, dtype))
                    if read is not None:
                        self._read_win.Put([np.ascontiguousarray(read[indices[a:b]], np.float32), MPI.FLOAT],
                                           rank, (0, 1, dtype))
                        self._read_win.Flush(rank)
                    self._grad_win.Flush(rank)
                finally:
                    dtype.Free()
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
        self._watch.end()   # (begun by the push)

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
            heads = heads_of(self._heads)
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
        for name in self._wins:
            getattr(self, name).Sync()
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
        self._heads[:] = head_cells(heads_of(state["heads"]))
        if self._reads is not None:
            self._reads[:] = state["reads"]
        for name in self._wins:
            getattr(self, name).Sync()


class ControlWindow(TableLayout, _Windows):
    """Per-worker and per-server counters in one window on `home`.

    No write takes a lock. Open MPI's osc/rdma (the component across nodes)
    makes every `Accumulate` and `Fetch_and_op` hold an exclusive lock in the
    target's memory for the length of the operation; a rank cut off or
    stalled while holding it blocks every other rank's next accumulate on
    that table, the home's own included (a cut-off worker froze server 0 mid
    write, so the job's stall named the server, not the worker; docs/multinode.md).
    So the window holds, after the table's float64 cells:

    - each slot has one writer (a worker its row, a server its row): `write`
      is a `Put`;
    - one cell per rank counting its writes, a `Put` by that rank once its
      values are complete: a poll that finds every count as the last `read`
      did (`changed`: one `Get` of 8 bytes a rank) knows the table is as that
      read saw it, and skips its reading, its view and its paradigm's
      decisions (benchmarks/results/overhead.md);
    - the fetch-and-add counters (`counters`: the global budget's claims),
      int64 cells changed only by one-element `Fetch_and_op`, which Open MPI
      does with the network's atomics, lock-free, on a window that promises
      only such accumulates (_INFO's acc_single_intrinsic). `read` returns
      them in their table cells.

    Readers take the table with one `Get` (a few hundred bytes), without a
    lock: a cell is an aligned 8-byte word, which the copies of shared
    memory and of the TCP transport move whole.
    """

    _wins = ("_win",)

    def __init__(self, comm: MPI.Intracomm, home: int, workers: int, servers: int, *,
                 counters: tuple[int, ...] = (), world_home: int | None = None,
                 watchdog: Unwatched = UNWATCHED):
        super().__init__(workers, servers)
        self.comm = comm
        self.home = home
        self._watch, self._home = watchdog, (home if world_home is None else world_home,)
        ranks = comm.Get_size()
        self._writes_at, self._counters_at = self.size, self.size + ranks
        count = self.size + ranks + len(counters) if comm.Get_rank() == home else 0
        self._win, _ = _allocate(comm, count, np.float64)
        comm.Barrier()
        self._win.Lock_all()
        self._writes = 0                               # this rank's writes
        self._mine = np.zeros(1)                       # the same, as it is Put
        self._mine_at = self._writes_at + comm.Get_rank()
        self._seen = np.zeros(ranks)                   # every rank's writes as of the last read
        self._now = np.zeros(ranks)                    # the same as of the last `changed`
        self._counted = np.zeros(len(counters), np.int64)
        self._counter_cells = list(counters)

    def read(self) -> np.ndarray:
        """One consistent-enough copy of the whole table (each slot atomic)."""
        self._watch.begin("a read of the control table", self._home)
        win, home = self._win, self.home
        win.Get([self._seen, MPI.DOUBLE], home, (self._writes_at, len(self._seen), MPI.DOUBLE))
        win.Flush(home)   # the counts before the values they count
        win.Get([self.latest, MPI.DOUBLE], home, (0, self.size, MPI.DOUBLE))
        if self._counter_cells:
            win.Get([self._counted, MPI.INT64_T], home, (self._counters_at, len(self._counted), MPI.INT64_T))
        win.Flush(home)
        self._watch.end()
        if self._counter_cells:   # (numpy's fancy indexing costs microseconds, also with no index)
            self.latest[self._counter_cells] = self._counted
        return self.latest.copy()

    def changed(self) -> bool:
        """Whether anything was written since the last `read`."""
        self._watch.begin("a read of the control table's counts", self._home)
        self._win.Get([self._now, MPI.DOUBLE], self.home, (self._writes_at, len(self._now), MPI.DOUBLE))
        self._win.Flush(self.home)
        self._watch.end()
        return self._now.tobytes() != self._seen.tobytes()   # (np.array_equal: 10x the time, 2.5 us)

    def is_home(self) -> bool:
        return self.comm.Get_rank() == self.home

    def write(self, offset: int, values) -> None:
        """Values from `offset` on; a counter among them is set (a checkpoint's
        table restored before the run starts: nothing adds to it then)."""
        vals = np.ascontiguousarray(values, dtype=np.float64).reshape(-1)
        self._watch.begin("a write to the control table", self._home)
        self._win.Put([vals, MPI.DOUBLE], self.home, (offset, len(vals), MPI.DOUBLE))
        for k, cell in enumerate(self._counter_cells):
            if offset <= cell < offset + len(vals):
                self._win.Put([np.full(1, vals[cell - offset], np.int64), MPI.INT64_T], self.home,
                              (self._counters_at + k, 1, MPI.INT64_T))
        self._win.Flush(self.home)   # the values first, then the count
        self._writes += 1
        self._mine[0] = self._writes   # (an in-place add on the array: 1.7 us)
        self._win.Put([self._mine, MPI.DOUBLE], self.home, (self._mine_at, 1, MPI.DOUBLE))
        self._win.Flush(self.home)
        self._watch.end()

    def add(self, offset: int, value: float) -> float:
        """Atomic fetch-and-add of a whole number to one of `counters`;
        returns the value before. For counters that only their adders read
        (the global budget's claims): no wait's condition may read one,
        since the simulator does not check waits again when it changes
        (local.LocalControlTable.add), and a poll skips its check where
        nothing else was written (`changed`)."""
        k, amount = self._counter_cells.index(offset), int(value)
        if amount != value:
            raise ValueError(f"ControlWindow.add: {value!r} is not a whole number (the counters are int64)")
        result = np.zeros(1, np.int64)
        self._watch.begin("a fetch-and-add on the control table", self._home)
        self._win.Fetch_and_op([np.full(1, amount, np.int64), MPI.INT64_T], [result, MPI.INT64_T], self.home,
                               self._counters_at + k, MPI.SUM)
        self._win.Flush(self.home)
        self._watch.end()
        return float(result[0])


# Seconds between the calls of a ProgressThread: a one-sided operation aimed
# at its rank waits about this long for it, and the thread costs its rank a
# few percent of a core (it sleeps in between). MPIPS_PROGRESS_INTERVAL
# changes it, 0 turns the threads off (an MPI whose one-sided operations
# progress by themselves, RDMA hardware).
PROGRESS_INTERVAL = 100e-6


def progress_interval() -> float:
    """PROGRESS_INTERVAL, or MPIPS_PROGRESS_INTERVAL's seconds (0: no thread)."""
    text = os.environ.get("MPIPS_PROGRESS_INTERVAL")
    if text is None:
        return PROGRESS_INTERVAL
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < 1:
        raise ConfigError("MPIPS_PROGRESS_INTERVAL", text, "seconds between progress calls, >= 0 and < 1 (0: none)")
    return value


class ProgressThread:
    """Keeps MPI progressing on a rank that others reach one-sidedly (a
    server: its windows), whatever the rank itself is doing (applying,
    logging, sleeping in a wait). Across nodes without RDMA hardware a Get,
    Put or Accumulate aimed at a rank completes only when that rank calls
    MPI (Open MPI: osc/rdma over the TCP btl; MPICH: its atomics), and a
    server that sleeps a millisecond between polls held every worker's
    operations that long, many times an iteration (docs/multinode.md). The
    thread calls `Iprobe` on a communicator of its own every
    PROGRESS_INTERVAL seconds and sleeps in between: no spinning, ranks may
    share cores. Needs MPI_THREAD_MULTIPLE (mpi4py's default)."""

    def __init__(self, comm: MPI.Intracomm, interval: float = PROGRESS_INTERVAL):
        self._comm, self._interval = comm, interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mpips-progress", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._comm.Iprobe()
            time.sleep(self._interval)

    def free(self) -> None:
        self._stop.set()
        self._thread.join()


class MPITransport:
    """transport.Transport and transport.Collectives of this rank of `comm`
    (COMM_WORLD by default); a wait of a collective warns after `warn`
    seconds and fails after `timeout` (the configuration's stall_*).
    `order`: from every rank's host, the launched ranks in the order that
    numbers them (the placement's, mpips/runtime/placement.py); rank 0's
    answer renumbers the ranks before anything else is made (_renumber).

    MPI's own collectives (a window's allocation, a split, a broadcast, a
    barrier) block until every rank is in them: a rank stopped (SIGSTOP, a
    node swapping) before one, or inside it, held every other rank there
    beyond any wait of ours, and a job with a rank stopped in its first
    seconds hung, silent, until it was killed from outside. Each is made
    through `blocking`, which ends the job past the stall timeout.

    A context manager: its end frees every window and communicator it made
    (`close`, collective) when the job ends on every rank alike (returning,
    or an `EveryRank` exception); a rank that fails alone leaves them to the
    abort that follows (a collective free would wait for ranks still
    training). After either, a use is a `Freed` error."""

    def __init__(self, comm: MPI.Intracomm | None, *, warn: float, timeout: float,
                 order: Callable[[list[str]], list[int]] | None = None):
        self.comm = MPI.COMM_WORLD if comm is None else comm
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        self.warn, self.timeout = warn, timeout
        self.started = False         # the run's clock started (run): a stuck collective is then exit 1, not 2
        self._made: list = []        # windows and communicators, freed by close()
        self._placed: list = []      # the communicator renumbered by placement (_renumber), freed last
        #: every rank's host (MPI's processor name), in rank order
        self.hosts: list[str] = self.allgather(MPI.Get_processor_name(), what="set-up (every rank's host)")
        if order is not None:
            self._renumber(self.bcast(order(self.hosts) if self.rank == 0 else None))
        self.ranks = [self.rank]
        self.clock = WallClock()
        # one cell on rank 0 counting the ranks that failed alone (first_to_fail)
        self._failures = self.blocking("set-up (a window's allocation)",
                                       lambda: ControlWindow(self.comm, 0, 0, 0, counters=(0,)))
        #: every rank as messages name it (name_ranks adds its role once the layout is known)
        self.names = [f"rank {r} on {host}" for r, host in enumerate(self.hosts)]
        self.watchdog = Watchdog(timeout, lambda r: self.names[r], lambda: self.comm.Abort(1 if self.started else 2),
                                 me=lambda: self.names[self.rank])
        # a job across nodes: a communicator for the servers' progress threads (ProgressThread)
        self._progress_interval = progress_interval()
        self._progress_comm = (self.blocking("set-up (a communicator's duplication)", self.comm.Dup)
                               if len(set(self.hosts)) > 1 and self._progress_interval > 0
                               and MPI.Query_thread() == MPI.THREAD_MULTIPLE else None)
        self._progress: ProgressThread | None = None

    def _renumber(self, order: list[int]) -> None:
        """Rank r becomes the launched rank order[r] (rank 0's choice, the
        placement's): a communicator split in that order, freed last."""
        if order == list(range(self.size)):
            return
        comm = self.blocking("set-up (the ranks renumbered by placement)",
                             lambda: cast(MPI.Intracomm, self.comm.Split(0, order.index(self.rank))))
        self._placed = [comm]
        self.comm, self.rank = comm, comm.Get_rank()
        self.hosts = [self.hosts[r] for r in order]

    def name_ranks(self, placement: list[dict]) -> None:
        """Messages name a rank with its role and host: 'rank 3 (worker 2) on node2'."""
        self.names = [f"rank {p['rank']} ({p['role'].replace('_', ' ')} {p['index']}) on {p['host']}"
                      for p in placement]

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

    def allgather(self, value, *, what: str, name: Callable[[int], str] = str) -> list:
        return allgather_within(self.comm, value, what=what, warn=self.warn, timeout=self.timeout, name=name)

    def bcast(self, value, root: int = 0):
        return self.blocking("a broadcast", lambda: self.comm.bcast(value, root=root))

    def gather(self, value, wait: Callable, root: int = 0) -> list | None:
        """Every rank's `value` in rank order at `root` (None elsewhere), by
        point-to-point messages under `wait(ready, missing)`, a role's wait
        (its stall timeout): `missing()` is the ranks whose value has not
        arrived at `root`, or [root] for one whose value `root` has not taken.
        A blocking gather could only say that some rank never came."""
        comm = self.comm
        if self.rank != root:
            sent = comm.isend(value, dest=root, tag=_GATHER)
            wait(sent.Test, lambda: [root])
            return None
        got = {root: value}

        def arrived() -> bool:
            for r in range(self.size):
                if r not in got:
                    message = comm.improbe(source=r, tag=_GATHER)
                    if message is not None:
                        got[r] = message.recv()
            return len(got) == self.size

        wait(arrived, lambda: [r for r in range(self.size) if r not in got])
        return [got[r] for r in range(self.size)]

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
                                 world_server_ranks=spec.servers, watchdog=self.watchdog)
        table = ControlWindow(comm, local[0], spec.table_rows, len(spec.servers), counters=(G.CLAIMED,),
                              world_home=spec.servers[0], watchdog=self.watchdog)
        self._made += [store, table]
        if rank in spec.servers and self._progress_comm is not None and self._progress is None:
            self._progress = ProgressThread(self._progress_comm, self._progress_interval)
        return {rank: LevelHandles(store, table)}

    def each(self, work: dict) -> np.ndarray:
        mine = work[self.rank]() if work else np.nan
        return np.array(self.allgather(mine, what="set-up (every rank's work before the start)"))

    def run(self, bodies: dict, elapsed: float, name: Callable[[int], str] = str) -> dict:
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
        """Free the levels' windows and communicators, the last made first (collective)."""
        if self._progress is not None:   # before its windows go
            self._progress.free()
            self._progress = None
        self.watchdog.free()
        made = (self._placed + ([self._progress_comm] if self._progress_comm is not None else [])
                + [self._failures] + self._made)
        self._made, self._placed, self._progress_comm, self._failures = [], [], None, _Gone("MPITransport")

        def free():
            for thing in reversed(made):
                thing.free() if isinstance(thing, _Windows) else thing.Free()
        self.blocking("freeing the windows", free)

    def __enter__(self) -> "MPITransport":
        return self

    def __exit__(self, kind, error, trace) -> None:
        if error is None or isinstance(error, EveryRank):
            self.close()
        else:   # this rank alone: the job is aborted next (abort_job), which frees them
            if self._progress is not None:
                self._progress.free()
                self._progress = None
            self.watchdog.free()
            self._made, self._placed, self._progress_comm, self._failures = [], [], None, _Gone("MPITransport")
