"""The shared state of a run, as every transport lays it out.

The parameter store's gradient slots and how a server sums them, and the
control table's columns, offsets and read-only views: the same for the MPI
windows (mpips/runtime/transport/mpi.py) and the simulator's in-process arrays
(mpips/runtime/transport/local.py), which differ only in how bytes move.
"""
from __future__ import annotations

from enum import IntEnum
from typing import Any, NamedTuple

import numpy as np

from ..paradigms.value_staleness import norm_of_shards
from ..paradigms.view import EXTRAS, SLOT_MODE, SLOT_MODE_CLOCK, ClusterView


def shard_bounds(n: int, servers: int) -> list[tuple[int, int]]:
    """Even contiguous split of n parameters over the servers."""
    edges = np.linspace(0, n, servers + 1).round().astype(np.int64)
    return [(int(edges[s]), int(edges[s + 1])) for s in range(servers)]


class SlotRows:
    """A parameter store's client rows (the control-table rows that push)
    and each one's gradient slot on every server."""

    def __init__(self, rows):
        self.rows = [int(r) for r in rows]
        self._slot_of = {row: k for k, row in enumerate(self.rows)}

    def slot(self, row: int) -> int:
        try:
            return self._slot_of[row]
        except KeyError:
            raise ValueError(f"row {row} has no gradient slot (slots for rows {self.rows})") from None


def sum_slots(out: np.ndarray, slots: Any, heads: Any, slot_of: dict, clocks, consumed, *,
              sparse: bool, each=None, reads: np.ndarray | None = None) -> int:
    """Sum into `out` the pushes counted in `clocks` and not in `consumed`
    (per row of the control table), in the order of their keys, then rows;
    returns how many. `slots`, `heads`: one server's gradient slots and
    their heads (push number, order key, the version read, scale: `Head`),
    by slot (arrays under MPI, lists in the simulator); `slot_of`: row ->
    slot. A slot holds its row's latest push, numbered with the clock that
    counts it (a GSSP group server's clock counts the worker pushes a delta
    carries): a counted push whose slot does not hold its number was never
    written (rejected: NaN/Inf). Sparse slots are zeroed once taken.
    `each(row, head, push, read)`, where given (`heads` then `Head`s), is
    what goes into the sum for each push (an async rule's: `reads`, the
    slots of the parameters each push was read at, or None)."""
    written = []
    for row in np.flatnonzero(np.asarray(clocks) > np.asarray(consumed)):
        k = slot_of[int(row)]
        number, key = heads[k][0], heads[k][1]
        if number == int(clocks[row]):   # else rejected: never written
            written.append((int(key), int(row), k))
    written.sort()
    summed = 0
    for _, pusher, k in written:
        push = slots[k]
        if each is not None:
            push = each(pusher, heads[k], push, None if reads is None else reads[k])
        if summed:
            np.add(out, push, out=out)
        else:
            np.copyto(out, push)
        summed += 1
        if sparse:
            slots[k] = 0
    if not summed:
        out[:] = 0
    return summed


class Head(NamedTuple):
    """What a push says of itself beside its data, in its slot's head: its
    number (the clock that counts it), the key it is summed in the order of,
    the version of this server's shard it was computed on (the server's
    pushes applied when the worker read it) and the factor the worker scaled
    it by (an async rule's tau and gradient)."""

    number: int
    key: int
    version: int = 0
    scale: float = 1.0


HEAD = len(Head._fields)   # int64 cells of a head in an MPI window (the scale's bits in the last)


def head_cells(heads: list[Head]) -> np.ndarray:
    """Heads as an MPI window holds them (and a checkpoint keeps them): HEAD
    int64 cells each, the scale's float64 bits last."""
    cells = np.zeros((len(heads), HEAD), np.int64)
    if heads:
        cells[:, :3] = [h[:3] for h in heads]
        cells[:, 3] = np.array([h.scale for h in heads], np.float64).view(np.int64)
    return cells


def heads_of(cells) -> list[Head]:
    """The heads of `head_cells`' cells; cells of a number and a key only
    (an older checkpoint's) are heads of version 0 and scale 1."""
    cells = np.asarray(cells, np.int64)
    if cells.shape[1] < HEAD:
        return [Head(n, k) for n, k in cells[:, :2].tolist()]
    scales = cells[:, 3].copy().view(np.float64).tolist()
    return [Head(n, k, v, scale) for (n, k, v, _), scale in zip(cells.tolist(), scales)]


class W(IntEnum):
    """Columns of a worker's row in the control table."""

    CLOCK = 0        # pushes completed (the push counter servers watch)
    PUSH_T0 = 1      # time of the latest push
    PUSH_T1 = 2      # time of the previous push
    ITER_TIME = 3    # busy time (pull + compute + push) of the last iteration
    DONE = 4         # 1 after the last push
    REJECTED = 5     # pushes rejected (NaN/Inf)
    WAIT_TOTAL = 6   # seconds spent waiting at gates
    ELAPSED = 7      # seconds since start at the last tick
    SAMPLES = 8      # samples pushed in total
    EXTRA0 = 9       # paradigm-specific (e.g. DSSP credit, LB-BSP prediction)
    EXTRA1 = 10
    EXTRA2 = 11
    EXTRA3 = 12
    EXTRA4 = 13
    EXTRA5 = 14
    HALTED = 15      # the last checkpoint request this worker stopped for (mpips/runtime/recovery/checkpointer.py)


_HALTED = int(W.HALTED)
assert _HALTED - W.EXTRA0 == EXTRAS   # the cells between are the extras


def publish_client_row(control, index: int, *, clock: int, push_times, busy: float, done: bool,
                       wait_total: float, elapsed: float, samples: float, rejected: int = 0,
                       extras=()) -> None:
    """Write client `index`'s row of `control` (a worker's, or a group
    server's in the global table) in one write: every column but HALTED,
    which only the checkpoint protocol writes (so a publish never undoes a
    worker's stop for a checkpoint)."""
    # in the columns' order, up to HALTED (the last); a list, not an array
    # filled cell by cell: a worker publishes at every tick
    row = [clock, push_times[0], push_times[1], busy, 1.0 if done else 0.0, rejected, wait_total,
           elapsed, samples, *extras]
    if len(row) > _HALTED:
        raise ValueError(f"{len(extras)} extras: a row has {_HALTED - W.EXTRA0} (Paradigm.extras)")
    row += [0.0] * (_HALTED - len(row))
    control.write(control.worker_offset(index), row)


class S(IntEnum):
    """Columns of a server's row (followed by W per-worker applied counts)."""

    PUSHES = 0       # pushes applied
    STEPS = 1        # optimizer steps taken
    PATH = 2         # sum of norms of applied updates
    NORM_EMA = 3     # EMA of one update's norm
    DONE = 4
    BEGUN = 5        # steps begun: > STEPS while a step writes the parameters (VSGD exact)
    HALTED = 6       # the last checkpoint request this server stopped for (mpips/runtime/recovery/checkpointer.py)


class G(IntEnum):
    """Global slots at the start of the table."""

    MODE = SLOT_MODE              # Sync-Switch: MODE_BSP / MODE_ASP
    MODE_CLOCK = SLOT_MODE_CLOCK  # clock at which MODE takes effect (-1: being decided)
    EXTRA0 = 2
    EXTRA1 = 3
    # Coordinated checkpoints (mpips/runtime/recovery/checkpointer.py), written by server 0:
    CHECKPOINT = 4       # number of the latest checkpoint requested (0: none yet)
    CHECKPOINT_GO = 5    # n: every rank stopped for checkpoint n, save it; -n: cancelled
    CHECKPOINT_EXIT = 6  # n: the job ends after checkpoint n (preemption)
    CLAIMED = 7          # samples of the global budget claimed so far (mpips/runtime/roles/budget.py)


_NG, _NW, _NS = 8, len(W), len(S)


class TableLayout:
    """Where things are in a control table of `workers` client rows and
    `servers` server rows, and the paradigms' view of a snapshot; a
    transport adds `read`, `write` and `add` (fetch-and-add)."""

    def __init__(self, workers: int, servers: int):
        self.workers = workers
        self.servers = servers
        self.size = _NG + workers * _NW + servers * (_NS + workers)
        self.latest = np.zeros(self.size)   # the table as of the last `read()` (no copy, no communication)

    def read(self) -> np.ndarray:
        """The whole table, as of now (the transport's)."""
        raise NotImplementedError

    def checkpointed(self, cells) -> np.ndarray:
        """A checkpoint's table in this layout. One saved while a worker row
        held 4 extras, not EXTRAS (before LB-BSP's transfer cells), gets
        the newer extras as zeros before HALTED: written as it is, its rows
        would land misaligned."""
        cells = np.asarray(cells, dtype=float)
        if len(cells) == self.size:
            return cells
        old = _NW - (EXTRAS - 4)
        w, rest = self.workers, _NG + self.workers * old
        if len(cells) != rest + self.servers * (_NS + w):
            raise ValueError(f"a checkpoint's control table of {len(cells)} cells fits no layout of {w} "
                             f"worker rows and {self.servers} server rows ({self.size} cells)")
        rows = np.insert(cells[_NG:rest].reshape(w, old), [old - 1] * (EXTRAS - 4), 0.0, axis=1)
        return np.concatenate([cells[:_NG], rows.ravel(), cells[rest:]])

    def worker_offset(self, worker: int, col: int = 0) -> int:
        return _NG + worker * _NW + col

    def server_offset(self, server: int, col: int = 0) -> int:
        return _NG + self.workers * _NW + server * (_NS + self.workers) + col

    def worker_rows(self, snap: np.ndarray) -> np.ndarray:
        return snap[_NG:_NG + self.workers * _NW].reshape(self.workers, _NW)

    def server_rows(self, snap: np.ndarray) -> np.ndarray:
        start = self.server_offset(0)
        return snap[start:start + self.servers * (_NS + self.workers)].reshape(
            self.servers, _NS + self.workers)

    def read_cells(self, offsets: list[int]) -> np.ndarray:
        """The values of a few cells, as of now (the simulator re-checks a
        wait that read only these when one of them changes)."""
        return self.read()[offsets]

    def view(self, snap: np.ndarray, now: float, server: int = 0) -> "TableView":
        """The paradigms' read-only `ClusterView` of a snapshot, as `server` reads it (0 on a worker)."""
        return TableView(self, snap, now, server)




PER_WORKER = None   # a field's cells: rows of workers, which a gate that waits names (Gate.waiting_for)


class _Field:
    """A view field computed on first read, then kept (functools.cached_property
    without its lock: a view belongs to one thread), and its cells (`field`)."""

    def __init__(self, compute, cells):
        self.compute, self.cells = compute, cells
        self.name = compute.__name__

    def __get__(self, view, owner=None):
        if view is None:
            return self
        value = view.__dict__[self.name] = self.compute(view)
        return value


def field(*, cells):
    """A `TableView` field; `cells(table)`: the cells of the table it reads,
    or PER_WORKER. Declared with the field, so that the simulator's wake-ups
    (`TableView.cells`) know every cell a gate's answer may rest on."""
    return lambda compute: _Field(compute, cells)


def _of_servers(col: int):
    return lambda table: [table.server_offset(s, col) for s in range(table.servers)]


_CLOCK, _DONE = int(W.CLOCK), int(W.DONE)   # plain ints: IntEnum arithmetic is slow
_PUSHES, _PATH, _STEPS = int(S.PUSHES), int(S.PATH), int(S.STEPS)


class TableView(ClusterView):
    """A `ClusterView` of a control-table snapshot, each field computed on
    first use: a worker polls its gate every few microseconds while it waits,
    and a gate reads two or three fields of the fourteen
    (benchmarks/control_plane.py). The gates' fields are strided slices of the
    snapshot, converted once."""

    def __init__(self, table: TableLayout, snap: np.ndarray, now: float, server: int = 0):
        self.now = now
        self.server = server
        self._snap = snap
        self._table = table
        self._rows_end = _NG + table.workers * _NW

    @field(cells=PER_WORKER)
    def clocks(self) -> np.ndarray:
        return self._snap[_NG + _CLOCK:self._rows_end:_NW].astype(np.int64)

    @field(cells=PER_WORKER)
    def done(self) -> np.ndarray:
        return self._snap[_NG + _DONE:self._rows_end:_NW].astype(bool)   # written as 0 or 1

    @field(cells=PER_WORKER)
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

    def applied_to(self, worker: int) -> int:
        # two cells, not the whole column: a gate that waits for its own pushes reads only these
        t = self._table
        return int(min(self._snap[t.server_offset(s, _NS + worker)] for s in range(t.servers)))

    def progress(self) -> tuple[list, list, list]:
        return self._progress

    @field(cells=PER_WORKER)
    def _progress(self) -> tuple[list, list, list]:
        # straight from the snapshot, once per view (a server's poll reads it
        # twice): no numpy arrays made (floats holding integers)
        snap, end = self._snap, self._rows_end
        return (snap[_NG + _CLOCK:end:_NW].tolist(), self._applied().tolist(),
                snap[_NG + _DONE:end:_NW].tolist())

    @field(cells=PER_WORKER)
    def rejected(self) -> np.ndarray:
        """(W,) pushes each worker counted in its clock but rejected (NaN/Inf): nothing was sent."""
        return self._w[:, W.REJECTED].astype(np.int64)

    @field(cells=PER_WORKER)
    def _w(self) -> np.ndarray:
        return self._table.worker_rows(self._snap)

    @field(cells=PER_WORKER)
    def _s(self) -> np.ndarray:
        return self._table.server_rows(self._snap)

    @field(cells=_of_servers(int(S.PUSHES)))
    def updates(self) -> int:
        return int(self._server_column(_PUSHES).min())

    @field(cells=_of_servers(int(S.STEPS)))
    def steps(self) -> int:
        return int(self._server_column(_STEPS).min())

    @field(cells=_of_servers(int(S.STEPS)))
    def server_steps(self) -> np.ndarray:
        return self._server_column(_STEPS).astype(np.int64)

    @field(cells=lambda table: [table.server_offset(s, _NS + j) for s in range(table.servers)
                                for j in range(table.workers)])
    def server_applied(self) -> np.ndarray:
        return self._s[:, _NS:].astype(np.int64)

    @field(cells=_of_servers(int(S.PATH)))
    def path_length(self) -> float:
        return float(self._server_column(_PATH).sum())

    def _server_column(self, col: int) -> np.ndarray:
        # a strided slice of the snapshot, not the servers' rows reshaped first
        t = self._table
        lo = t.server_offset(0, col)
        return self._snap[lo:lo + t.servers * (_NS + t.workers):_NS + t.workers]

    def c_min(self, of: np.ndarray | None = None) -> int:
        if of is not None:
            return super().c_min(of)
        # the columns as floats (they hold integers), not converted first
        snap, end = self._snap, self._rows_end
        clocks = snap[_NG + _CLOCK:end:_NW]
        active = clocks[snap[_NG + _DONE:end:_NW] == 0]
        return int(active.min()) if active.size else int(clocks.max())

    @field(cells=_of_servers(int(S.NORM_EMA)))
    def update_norm_ema(self) -> float:
        return norm_of_shards(self._s[:, S.NORM_EMA])

    @field(cells=PER_WORKER)
    def push_times(self) -> np.ndarray:
        t = self._w[:, W.PUSH_T0:W.PUSH_T1 + 1]  # adjacent columns: a slice, not a list-index copy
        return np.where(t > 0, t, np.nan)

    @field(cells=PER_WORKER)
    def iter_times(self) -> np.ndarray:
        t = self._w[:, W.ITER_TIME]
        return np.where(t > 0, t, np.nan)

    @field(cells=lambda table: [SLOT_MODE])
    def mode(self) -> int:
        return int(self._snap[SLOT_MODE])

    @field(cells=lambda table: [SLOT_MODE_CLOCK])
    def mode_clock(self) -> int:
        return int(self._snap[SLOT_MODE_CLOCK])

    @field(cells=PER_WORKER)
    def extras(self) -> np.ndarray:
        return self._w[:, W.EXTRA0:W.EXTRA5 + 1].copy()

    @field(cells=lambda table: [int(G.EXTRA0), int(G.EXTRA1)])
    def slots(self) -> tuple[float, float]:
        return float(self._snap[G.EXTRA0]), float(self._snap[G.EXTRA1])

    @property
    def num_workers(self) -> int:
        return self._table.workers

    def cells(self, workers) -> list[int]:
        """The cells of the table whose change can make a gate that read this
        view and waits for `workers` pass (Gate.waiting_for): their applied
        counts and done flags, and the cluster-wide fields it read (mode, updates, ...)."""
        t, read = self._table, self.__dict__   # a field, once read, is in __dict__
        first, stride = t.server_offset(0, _NS), _NS + t.workers   # applied counts of server 0, the row length
        cells = [first + s * stride + j for j in workers for s in range(t.servers)]
        cells += [_NG + j * _NW + _DONE for j in workers]
        for name, of in _cluster_fields(type(self)):
            if name in read:
                cells += of(t)
        return cells


_CLUSTER_FIELDS: dict[type, list] = {}


def _cluster_fields(view_class: type) -> list:
    """(name, cells) of a view class's fields that read more than workers' rows
    (a field a subclass redefines, once: its own); computed once a class."""
    found = _CLUSTER_FIELDS.get(view_class)
    if found is None:
        fields = {f.name: f for k in reversed(view_class.__mro__) for f in vars(k).values() if isinstance(f, _Field)}
        found = _CLUSTER_FIELDS[view_class] = [(name, f.cells) for name, f in fields.items()
                                               if f.cells is not PER_WORKER]
    return found
