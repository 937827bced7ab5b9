"""What the roles and the assembler use of a transport, as protocols (after
wait.Clock), each transport in one module: MPI one-sided windows
(mpi_transport.py, the one module that imports mpi4py) and in-process arrays
under the virtual-time scheduler (local_transport.py)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, NamedTuple, Protocol

import numpy as np

from ..state import TableView
from .wait import Clock


class EveryRank(Exception):
    """Raised by every rank of a job at the same point (bad input found in
    set-up, the end after a preemption's checkpoint, a run judged failed):
    what the ranks hold together may be freed together on the way out."""


class ParameterStore(Protocol):
    """The flat parameters sharded over a level's servers, and on each server
    one gradient slot per client row (mpi_transport.ParameterWindows)."""

    bounds: list[tuple[int, int]]
    shard: np.ndarray                 # this server's shard (empty on a client)
    world_server_ranks: list[int]     # for messages

    @property
    def reads(self) -> bool: ...      # a slot per client for the parameters its push was read at

    def pull(self, out: np.ndarray) -> None: ...

    def observe(self, out: np.ndarray) -> None: ...   # an evaluation's read

    # versions: per server, the pushes it had applied to what the push was
    # computed on; scale: the client's factor on it; read: what it was
    # computed on (a store with `reads`): an async rule's (state.Head)
    def push(self, grad: np.ndarray, *, row: int, number: int, key: int = 0, versions=None,
             scale: float = 1.0, read: np.ndarray | None = None) -> None: ...

    def push_sparse(self, indices: np.ndarray, values: np.ndarray, *, row: int, number: int,
                    key: int = 0, versions=None, scale: float = 1.0, read: np.ndarray | None = None) -> None: ...

    # each: an async rule's transform of every push (state.sum_slots)
    def take_gradient(self, out: np.ndarray, clocks, consumed, each=None) -> int: ...

    def publish(self) -> None: ...

    # a checkpoint's copy of the slots (only MPI jobs take checkpoints)
    def pending(self) -> dict: ...

    def restore_pending(self, state: dict) -> None: ...


class ControlTable(Protocol):
    """A level's table of counters: a transport's verbs (read, write,
    fetch-and-add) over state.TableLayout's places and views, all that the
    roles use of it."""

    workers: int
    servers: int
    latest: np.ndarray   # the table as of the last read() (no copy, no communication)

    def read(self) -> np.ndarray: ...

    def read_cells(self, offsets: list[int]) -> np.ndarray: ...

    def write(self, offset: int, values) -> None: ...

    def add(self, offset: int, value: float) -> float: ...   # fetch-and-add

    def changed(self) -> bool: ...   # anything written since this handle's last read (a poll's cheap check)

    def is_home(self) -> bool: ...    # the table's memory is on this rank

    def worker_offset(self, worker: int, col: int = 0) -> int: ...

    def server_offset(self, server: int, col: int = 0) -> int: ...

    def worker_rows(self, snap: np.ndarray) -> np.ndarray: ...

    def server_rows(self, snap: np.ndarray) -> np.ndarray: ...

    def view(self, snap: np.ndarray, now: float, server: int = 0) -> TableView: ...


def unwatched(view: TableView, gate: Any) -> None:
    """A gate that did not pass, under a transport that polls: nothing to do."""


class LevelHandles(NamedTuple):
    """What a rank gets of one level: its store and table, and where a gate
    that did not pass is told (the simulator re-checks it only once what it
    waits for changed: its own hook, `LocalControlTable.gate_answered`)."""

    store: ParameterStore
    table: ControlTable
    watch_gate: Callable[[TableView, Any], None] = unwatched


class Collectives(Protocol):
    """What set-up and checkpoints exchange between the ranks of an MPI job,
    each wait bounded by the stall timeout (mpi_transport.allgather_within)."""

    rank: int
    size: int

    def allgather(self, value, *, what: str, name: Callable[[int], str] = str) -> list: ...

    def bcast(self, value, root: int = 0): ...

    def gather(self, value, wait: Callable, root: int = 0) -> list | None: ...   # `wait(ready, missing)`

    def scatter(self, values: list | None, root: int = 0): ...

    def barrier(self, wait: Callable) -> None: ...   # `wait(test)`: a role's wait on it


@dataclass(frozen=True)
class LevelSpec:
    """One level of servers: the world ranks with a handle on it (its servers
    first), its servers, the rows of its table and the rows that push into
    its store. `level`: 0 the global servers, 1 a group's."""

    members: tuple[int, ...]
    servers: tuple[int, ...]
    table_rows: int
    slot_rows: tuple[int, ...]
    level: int = 0


class Transport(Protocol):
    """Makes the levels and runs the role bodies: MPI this rank's, the
    simulator every rank's under its scheduler."""

    ranks: list[int]           # the world ranks this process runs

    @property
    def clock(self) -> Clock: ...   # (read-only: each transport's own kind of clock)

    def level(self, specs: list[LevelSpec], *, n: int, sparse: bool,
              reads: bool = False) -> dict[int, LevelHandles]:
        """Collective: (store, table) of `n` parameters for each of `ranks`
        that is a member of one of the (disjoint) `specs`."""

    def each(self, work: dict[int, Callable[[], float]]) -> np.ndarray:
        """Run this process's ranks' `work` before the clock starts; every
        world rank's result, nan where it had none."""

    def run(self, bodies: dict[int, Callable], elapsed: float, name: Callable[[int], str] = str) -> dict:
        """Start the clock (at `elapsed`: a resumed run's), run the bodies to
        the end; their results by rank. `name(rank)`: a rank in messages."""

    def total(self, counts: np.ndarray) -> np.ndarray: ...   # summed over the world
