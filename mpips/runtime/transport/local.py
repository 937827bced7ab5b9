"""The in-process transport of `mpips simulate`: the shared state in numpy
arrays, moved under a virtual clock.

The same verbs as the MPI windows (mpips/runtime/transport/mpi.py): a `LocalParameterStore`
pulls, pushes into a client's gradient slot, takes the pushed gradients and
publishes; a `LocalControlTable` reads, writes and fetch-and-adds. Every role
gets its own handle on one set of arrays (as every rank its own window
object), and every write tells the scheduler that the shared state changed,
and a control table's writes which cells (`gate_answered`).

Costs (the `Network` model, documented in docs/simulator.md): a pull or a
push takes latency + bytes / bandwidth of virtual time, its data read or
written at the end of it (a pull sees the parameters as they are when it
completes), plus a seeded random delay of mean `--sim-jitter`; the shards
of several servers move in parallel. With nodes (`--sim-nodes`,
mpips/node_links.py) the bytes for another node take the slower of the
two nodes' links, and a node's own link carries all its remote bytes. A
server's apply takes `--sim-apply` plus the bytes of the pushes it sums /
bandwidth, after it took them and before its step is seen. Control-table operations (a few hundred bytes)
take no virtual time.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ...node_links import NodeLinks
from ...paradigms.gates import furthest_behind
from ..layout import EVALUATOR, GROUP_SERVER, SERVER, WORKER
from ..state import Head, SlotRows, TableLayout, TableView, head_cells, heads_of, shard_bounds, sum_slots
from .protocols import LevelHandles
from .scheduler import Scheduler

ROLE_STREAMS = (SERVER, GROUP_SERVER, WORKER, EVALUATOR)   # a role's part of its delays' seed


@dataclass(frozen=True)
class Network:
    """latency + bytes / bandwidth per pull or push, plus a seeded random
    delay of mean `jitter` (exponential): real transfers and the work around
    them (notifying, polling) vary, and without it equally fast workers
    would push at the same instant in every round, which no cluster does (a
    server would then sum their pushes as one step:
    benchmarks/results/sim_vs_mpi.md). A server's apply: `apply` plus the
    summed pushes' bytes / bandwidth; until it ends, the pushes it took are
    not applied for anyone who looks (under MPI a push is seen 0.1-0.5 ms
    after it lands; without this, VSGD's workers saw each other's pushes
    sooner and damped more: benchmarks/results/sim_vs_mpi.md).

    Each role's handle draws its delays from a stream of its own (`link`):
    with one shared stream, every transfer of one role (an evaluator's read)
    shifted every later delay of all the others, and observing a run more
    often changed it."""

    latency: float = 20e-6      # s per message
    bandwidth: float = 10e9     # bytes/s
    jitter: float = 0.0         # s, mean of the random extra delay
    seed: int = 0
    apply: float = 0.0          # s of a server's step beyond its sum
    apply_per_push: float = 0.0  # s per push summed, beyond its bytes
    nodes: NodeLinks = NodeLinks()   # none: every rank on one node

    def link(self, level: int, role: str, index: int, servers: list[tuple[str, int]],
             bounds: list[tuple[int, int]]) -> "Link":
        """The transfers of one role's handle on one level of servers (0: the
        global servers, 1: a group server's), seeded by who it is, not by
        its rank (an evaluator's rank comes after the workers, a group
        server's before them); `servers`: (role, index) of that level's
        servers, `bounds` their shards."""
        key = [self.seed % (1 << 64), 0x7177E5, level, ROLE_STREAMS.index(role), index]
        return Link(self, np.random.default_rng(key), self.routes(role, index, servers, bounds))

    def routes(self, role: str, index: int, servers: list[tuple[str, int]],
               bounds: list[tuple[int, int]]) -> list[Route]:
        """(latency, bandwidth, share of the bytes) of each path the bytes of
        one role's pull or push take: one per node its servers are on (its
        own node's at the intra-node cost, another's at the slower of the two
        links), and its own node's link, which carries all the bytes for
        other nodes. A transfer ends when its slowest path does."""
        if not self.nodes.nodes:
            return [Route(self.latency, self.bandwidth, 1.0)]
        nodes, here = self.nodes.nodes, self.nodes.node_of(role, index)
        held: dict[int, int] = {}   # per node, the parameters its servers hold
        for (server_role, server), (lo, hi) in zip(servers, bounds):
            there = self.nodes.node_of(server_role, server)
            held[there] = held.get(there, 0) + hi - lo
        n = sum(held.values())
        routes = [Route(self.latency, self.bandwidth, count / n) if there == here else
                  Route(max(nodes[here].latency, nodes[there].latency),
                        min(nodes[here].bandwidth, nodes[there].bandwidth), count / n)
                  for there, count in held.items()]
        remote = sum(count for there, count in held.items() if there != here)
        if remote:
            routes.append(Route(nodes[here].latency, nodes[here].bandwidth, remote / n))
        return routes


@dataclass(frozen=True)
class Route:
    latency: float
    bandwidth: float
    share: float    # of a transfer's bytes


class Link:
    """One role's transfers under a `Network`: their times, with delays from
    the role's own seeded stream."""

    def __init__(self, network: Network, rng: np.random.Generator, routes: list[Route]):
        self.network, self._rng, self.routes = network, rng, routes
        self._delays: list[float] = []

    def seconds(self, nbytes: int) -> float:
        if len(self.routes) == 1:   # one node (`share` 1.0: the same float as bytes / bandwidth)
            route = self.routes[0]
            moved = route.latency + nbytes * route.share / route.bandwidth
        else:
            moved = max(r.latency + nbytes * r.share / r.bandwidth for r in self.routes)
        return moved + (self._delay() if self.network.jitter else 0.0)

    def apply_seconds(self, nbytes: int, pushes: int = 1) -> float:
        return self.network.apply + pushes * self.network.apply_per_push + nbytes / self.network.bandwidth

    def _delay(self) -> float:
        # drawn 4096 at a time (the same numbers as one at a time, in the same
        # order: numpy's generators fill an array draw by draw), popped from the end
        if not self._delays:
            self._delays = self._rng.exponential(self.network.jitter, 4096)[::-1].tolist()
        return self._delays.pop()


def move(dst: np.ndarray, where, src: np.ndarray) -> None:
    """dst[where] = src: the bytes of a pull or a push, which an MPI Get or
    Put moves too (benchmarks/simulator.py counts them apart from the
    simulator's own work)."""
    dst[where] = src


class SharedParameters:
    """The arrays behind every handle: per server its shard, one gradient
    slot per client row and each slot's head (state.Head); with `reads`,
    one more slot per row for the parameters its push was computed on."""

    def __init__(self, n: int, servers: int, rows: list[int], reads: bool = False):
        self.n = n
        self.bounds = shard_bounds(n, servers)
        self.rows = list(rows)
        self.shards = [np.zeros(hi - lo, np.float32) for lo, hi in self.bounds]
        self.slots = [np.zeros((len(self.rows), hi - lo), np.float32) for lo, hi in self.bounds]
        self.reads = [np.zeros_like(slots) for slots in self.slots] if reads else None
        # per server and slot: its head; tuples, not an array: a push sets one
        self.heads = [[Head(0, 0)] * len(self.rows) for _ in self.bounds]


class LocalParameterStore(SlotRows):
    """One role's handle on `SharedParameters` (transport.ParameterStore),
    moving its bytes over `link`. `server`: the index of the server this role is, or None."""

    def __init__(self, shared: SharedParameters, scheduler: Scheduler, link: Link, *,
                 server: int | None, world_server_ranks: list[int], sparse: bool = False):
        self._shared, self._scheduler, self._link = shared, scheduler, link
        super().__init__(shared.rows)
        self.n, self.bounds = shared.n, shared.bounds
        self.world_server_ranks = list(world_server_ranks)
        self.sparse = sparse
        self.shard_index = server
        self.shard = shared.shards[server] if server is not None else np.zeros(0, np.float32)
        self.count = self.shard.size
        self._source = id(shared)   # what the scheduler knows it by

    def pull(self, out: np.ndarray) -> None:
        self._scheduler.sleep(self._link.seconds(4 * self.n))
        self.observe(out)

    def observe(self, out: np.ndarray) -> None:
        """The parameters as they are now, in no virtual time: an evaluation
        observes the run and never shifts it (the inline evaluation of
        server 0 included), whatever its placement or cadence."""
        self._scheduler.read(self._source)
        for shard, (lo, hi) in zip(self._shared.shards, self.bounds):
            move(out, slice(lo, hi), shard)

    @property
    def reads(self) -> bool:
        return self._shared.reads is not None

    def push(self, grad: np.ndarray, *, row: int, number: int, key: int = 0, versions=None,
             scale: float = 1.0, read: np.ndarray | None = None) -> None:
        k = self.slot(row)
        self._scheduler.sleep(self._link.seconds(4 * self.n * (1 if read is None else 2)))
        for slots, (lo, hi) in zip(self._shared.slots, self.bounds):
            move(slots, k, grad[lo:hi])
        self._put_read(k, read)
        self._announce(k, number, key, versions, scale)

    def push_sparse(self, indices: np.ndarray, values: np.ndarray, *, row: int, number: int,
                    key: int = 0, versions=None, scale: float = 1.0, read: np.ndarray | None = None) -> None:
        if not self.sparse:
            raise RuntimeError("push_sparse into a store made without sparse=True")
        k = self.slot(row)
        # index and value, and the read parameters at those indices (ParameterWindows.push_sparse)
        self._scheduler.sleep(self._link.seconds((8 if read is None else 12) * len(indices)))
        for s, (lo, hi) in enumerate(self.bounds):
            a, b = np.searchsorted(indices, (lo, hi))
            move(self._shared.slots[s], (k, indices[a:b] - lo), values[a:b])
            if read is not None:
                assert self._shared.reads is not None, "a read pushed into a store made without reads"
                move(self._shared.reads[s], (k, indices[a:b] - lo), read[indices[a:b]])
        self._announce(k, number, key, versions, scale)

    def _put_read(self, k: int, read: np.ndarray | None) -> None:
        if read is not None:
            assert self._shared.reads is not None, "a read pushed into a store made without reads"
            for reads, (lo, hi) in zip(self._shared.reads, self.bounds):
                move(reads, k, read[lo:hi])

    def _announce(self, k: int, number: int, key: int, versions, scale: float) -> None:
        for s, heads in enumerate(self._shared.heads):
            heads[k] = Head(number, key, 0 if versions is None else int(versions[s]), scale)
        self._scheduler.changed(self._source)

    def take_gradient(self, out: np.ndarray, clocks, consumed, each=None) -> int:
        if not self.count:
            return 0
        s = self.shard_index
        assert s is not None   # (a shard's count is 0 on a client)
        reads = self._shared.reads
        taken = sum_slots(out, self._shared.slots[s], self._shared.heads[s], self._slot_of,
                          clocks, consumed, sparse=self.sparse, each=each,
                          reads=None if reads is None else reads[s])
        self._scheduler.sleep(self._link.apply_seconds(4 * self.count * taken, taken))
        return taken

    def publish(self) -> None:
        self._scheduler.changed(self._source)

    def pending(self) -> dict:
        """A copy of this server's slots, their heads and (a store with
        `reads`) the read parameters, as ParameterWindows.pending (a
        checkpoint's; a simulation takes none)."""
        s = self.shard_index
        assert s is not None   # (a server's)
        state = {"slots": self._shared.slots[s].copy(), "heads": head_cells(self._shared.heads[s])}
        if self._shared.reads is not None:
            state["reads"] = self._shared.reads[s].copy()
        return state

    def restore_pending(self, state: dict) -> None:
        s = self.shard_index
        assert s is not None
        self._shared.slots[s][:] = state["slots"]
        self._shared.heads[s] = heads_of(state["heads"])
        if self._shared.reads is not None:
            self._shared.reads[s][:] = state["reads"]


class SharedTable:
    """The array behind the handles of one control table. A read hands out
    a read-only view of the array, not a copy: a write copies the array
    first if it was handed out since the last write, so a snapshot never
    changes under its reader, and the many reads between two writes (gate
    checks, server polls) copy nothing."""

    def __init__(self, size: int):
        self.size = size
        self.cells = np.zeros(size)
        self.lent: np.ndarray | None = None   # the view handed out since the last write

    def snapshot(self) -> np.ndarray:
        if self.lent is None:
            self.lent = self.cells.view()
            self.lent.flags.writeable = False
        return self.lent

    def writable(self) -> np.ndarray:
        if self.lent is not None:
            self.cells = self.cells.copy()
            self.lent = None
        return self.cells

    def fetch_add(self, offset: int, value: float) -> float:
        """Add in place, even to a snapshot lent out (no copy): a
        fetch-and-add counter is read by no view (`LocalControlTable.add`)."""
        cells = self.cells
        before = float(cells[offset])
        cells[offset] = before + value
        return before


class LocalControlTable(TableLayout):
    """One role's handle on a control table held in one `SharedTable`."""

    def __init__(self, table: SharedTable, scheduler: Scheduler, workers: int, servers: int):
        super().__init__(workers, servers)
        if table.size != self.size:
            raise ValueError(f"a table of {table.size} slots for {workers} workers and {servers} servers")
        self._table, self._scheduler = table, scheduler
        self._source = id(table)   # what the scheduler knows it by

    @classmethod
    def shared(cls, workers: int, servers: int) -> SharedTable:
        """The array behind the handles of one table."""
        return SharedTable(TableLayout(workers, servers).size)

    def read(self) -> np.ndarray:
        self._scheduler.read(self._source)
        self.latest = snap = self._table.snapshot()
        return snap

    def read_cells(self, offsets: list[int]) -> np.ndarray:
        # a wait on these cells is checked again only when one of them changes
        self._scheduler.read(self._source, offsets)
        return self._table.cells[offsets]

    def write(self, offset: int, values) -> None:
        table = self._table
        if isinstance(values, list):
            # a worker's row or one cell: compared in Python, a few numpy calls
            # fewer (a worker publishes at every tick); NaN over NaN, or 0.0
            # over -0.0, changes nothing any check can see
            old = table.cells[offset:offset + len(values)].tolist()
            changed = [k for k, (a, b) in enumerate(zip(old, values)) if a != b and (a == a or b == b)]
            if changed:
                cells = table.writable()
                for k in changed:   # cell by cell: a list's conversion to an array costs more
                    cells[offset + k] = values[k]
                self._scheduler.changed(self._source, [offset + k for k in changed])
            return
        vals = np.asarray(values, dtype=np.float64).ravel()
        end = offset + vals.size
        # bit for bit: a cell rewritten with its value changes nothing (a
        # server's row holds every worker's applied count, a step moves a few)
        changed = (table.cells[offset:end].view(np.int64) != vals.view(np.int64)).nonzero()[0]
        if changed.size:
            table.writable()[offset:end] = vals
            self._scheduler.changed(self._source, (changed + offset).tolist())

    def add(self, offset: int, value: float) -> float:
        # A fetch-and-add counter (the global budget's claims) is read through
        # `add` by its adders and by no wait or view (`ControlWindow.add`'s
        # contract): it is added to in place, not copied first, and a wait
        # that read the whole table is not woken by it, only to fail again
        # (a server or GSSP's group servers at every claim of every worker)
        before = self._table.fetch_add(offset, value)
        self._scheduler.changed(self._source, (offset,), whole=False)
        return before

    def is_home(self) -> bool:
        return True   # every role's handle is on the one array

    def changed(self) -> bool:
        return True   # (nothing polls: the scheduler checks a wait when what it read changes)

    def gate_answered(self, view: TableView, gate) -> None:
        """Re-check a worker's gate only when it may pass. A gate that does
        not pass cannot before each worker in its `waiting_for` has more
        pushes applied or is done (paradigms.base.Gate); so it waits for one
        of them, the one furthest behind (`behind`, when the gate gave it),
        and the scheduler skips every check in between (at 256 workers, most
        writes would otherwise wake most gates, all to fail:
        benchmarks/results/simulator.md)."""
        workers, behind = gate.waiting_for, gate.behind
        if not workers:
            return
        if behind >= 0:
            workers = (behind,)
        elif len(workers) > 1:
            among = np.zeros(view.num_workers, bool)
            among[list(workers)] = True
            workers = (furthest_behind(view.applied, view.clocks, among),)
        self._scheduler.depends_on(self._source, view.cells(workers))


class LocalTransport:
    """transport.Transport: every rank of `layout` a task of one scheduler, bytes moved under `network`."""

    def __init__(self, layout, network: Network):
        self.layout, self.network = layout, network
        self.scheduler = self.clock = Scheduler()
        self.ranks = list(range(layout.size))

    def level(self, specs, *, n: int, sparse: bool, reads: bool = False) -> dict:
        handles = {}
        for spec in specs:
            shared = SharedParameters(n, len(spec.servers), spec.slot_rows, reads)
            table = LocalControlTable.shared(spec.table_rows, len(spec.servers))
            for rank in spec.members:
                role, index = self.layout.role(rank)
                link = self.network.link(spec.level, role, index, [self.layout.role(s) for s in spec.servers],
                                         shared.bounds)
                store = LocalParameterStore(
                    shared, self.scheduler, link,
                    server=spec.servers.index(rank) if rank in spec.servers else None,
                    world_server_ranks=list(spec.servers), sparse=sparse)
                mine = LocalControlTable(table, self.scheduler, spec.table_rows, len(spec.servers))
                handles[rank] = LevelHandles(store, mine, mine.gate_answered)
        return handles

    def each(self, work: dict) -> np.ndarray:
        """In virtual time; the run's clock starts after it, as a job's does."""
        tasks = [self.scheduler.spawn(f"rank {rank} before the start", fn) for rank, fn in work.items()]
        self.scheduler.run()
        self.clock.origin = self.scheduler.now
        results = np.full(self.layout.size, np.nan)
        results[list(work)] = [task.result for task in tasks]
        return results

    def run(self, bodies: dict, elapsed: float, name: Callable[[int], str] = str) -> dict:
        tasks = {rank: self.scheduler.spawn("rank {} ({} {})".format(rank, *self.layout.role(rank)), body)
                 for rank, body in bodies.items()}
        self.scheduler.run()
        return {rank: task.result for rank, task in tasks.items()}

    def total(self, counts: np.ndarray) -> np.ndarray:
        return counts
