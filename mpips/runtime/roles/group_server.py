"""A GSSP group server: its group's parameter server, and the group's link
to the global servers.

Inside the group it is the ordinary `Server` loop over the group's windows
(a full copy of the parameters, the group's control table): each push is
applied when it arrives, with the configured optimizer. Every k pushes
(`exchange_every`, default the group size), and once more with the group's
last push, it exchanges with the global servers and waits for nothing:

- it pushes its progress since the last exchange (`GroupDelta`, GDTopK-
  compressed when configured) as the gradient -delta, which the global
  servers' rule `Sum` adds whenever it arrives (levels.py);
- it pushes into its own slot on the global servers, which holds one delta:
  it first waits until they took the previous one (they apply whatever
  arrived, so this is short), and then, with every earlier delta applied,
  pulls the global parameters and continues from them (plus what they do
  not hold yet). `synced` is still checked and logged.

Pushes landing in its gradient window meanwhile wait there for its next step.

Checkpoints: it relays them to its group (checkpointer.py).
"""
from __future__ import annotations

import numpy as np

from ...paradigms.compress import Compressor, SparseGrad, dense_of, make_compressor, speed_ranks
from ...paradigms.grouping import GroupSpeed, group_options
from ...paradigms.view import SLOT_GROUP_SPEED_RANK
from ...training.optim import server_rule
from ..context import Context
from ..state import S, W, publish_client_row
from .server import Server


class GroupDelta:
    """The update a group server owes the global servers (pure numpy).
    `params` is the group's copy, which moves with every push it applies. At
    an exchange it sends `delta = params - base`, its progress since the last
    exchange (through the compressor's error feedback), and then continues
    either from the global parameters, when they already hold everything this
    group sent before, plus what they do not hold yet (this payload and the
    compressor's residual), or from its own copy. Either way the next delta
    is measured from the new base, so no progress is sent twice or lost;
    which one only decides how fresh the group's copy is."""

    def __init__(self, params: np.ndarray, compressor: Compressor):
        self.params = params
        self.base = params.copy()
        self.compressor = compressor
        self._delta = np.empty_like(params)
        self._next = np.empty_like(params)
        self._payload: SparseGrad | np.ndarray | None = None

    def take(self, *, flush: bool = False) -> SparseGrad | np.ndarray:
        """What to send now; `flush` sends the compressor's whole residual too
        (dense), as at every epoch end and at the last exchange."""
        np.subtract(self.params, self.base, out=self._delta)
        payload = self.compressor.compress(self._delta)
        if flush and self.compressor.sparse:   # (a dense one holds nothing back)
            payload = dense_of(payload) + self.compressor.flush()
        self._payload = payload
        return payload

    def rebase(self, pulled: np.ndarray | None = None, landed: np.ndarray | None = None) -> None:
        """After sending `take()`'s payload: continue from `pulled` (global
        parameters holding every earlier payload) plus that payload and the
        residual, or, with None, from the group's own copy. `landed`, if
        given, gets `pulled` plus the payload: the global parameters once it
        is applied, if nothing else lands first (an async rule's read)."""
        if pulled is not None:
            nxt = self._next
            np.copyto(nxt, pulled)
            if isinstance(self._payload, SparseGrad):
                self._payload.add_to(nxt)
            else:
                nxt += self._payload
            if landed is not None:
                np.copyto(landed, nxt)
            if self.compressor.sparse:
                nxt += self.compressor.residual
            np.copyto(self.params, nxt)  # one copy: readers of params see fewer torn states
        np.copyto(self.base, self.params)
        self._payload = None


# A group server's row in the global control table is a worker row whose
# CLOCK counts the worker pushes it has forwarded (so the global servers'
# epochs and evaluation schedule count worker pushes), and as its extras:
EXCHANGES = W.EXTRA0     # exchanges so far
EPOCH_TIME = W.EXTRA1    # its group's speed: GroupSpeed.time (s)


class GroupServer(Server):
    """`ctx` is the group level (its windows), `up` the global level."""

    def __init__(self, ctx: Context, up: Context, *, group: int, members: list[int],
                 speed: GroupSpeed, speed_rank: int):
        super().__init__(ctx, server_rule(ctx.config, ctx.store.shard, total_epochs=ctx.plan.epochs))
        self.s = 0                  # the one server of its group's table (ctx.index is the group)
        self.up = up
        self.g = group
        self.members = members
        self.k = group_options(ctx.config).exchange_every or len(members)
        self.speed = speed
        self.speed_rank = speed_rank
        self.delta = GroupDelta(ctx.store.shard, make_compressor(ctx.config, stream=ctx.layout.workers + group))
        self.pulled = np.empty_like(ctx.store.shard)
        # The global parameters its next delta builds on, as the global
        # servers count them (their pushes applied) and, for a DC rule, as
        # they are: an async rule's version and read of its next push
        self.read_versions = np.zeros(up.table.servers, np.int64)
        self.read = np.empty_like(ctx.store.shard) if up.store.reads else None
        self._version_cells = [up.table.server_offset(s, S.PUSHES) for s in range(up.table.servers)] \
            if ctx.config.async_rule != "none" else None
        self.neg = np.empty_like(ctx.store.shard)
        self.since = 0              # worker pushes applied since the last exchange
        self.forwarded = 0          # worker pushes whose progress went up
        self.exchanges = 0
        self.flushed_epochs = 0     # group epochs whose end flushed the residual
        self.exchange_times = [0.0, 0.0]
        self.sent_final = False

    def start(self) -> None:
        """Before the clock starts: the group's speed rank for its workers,
        and this group's row for the other group servers to rank against."""
        self.ctx.table.write(SLOT_GROUP_SPEED_RANK, [self.speed_rank])
        self.publish_up(done=False, duration=0.0, pushes=0)

    def run(self) -> None:
        """Serve the group; then, until the global servers finish, go on
        relaying checkpoints for the group's done workers."""
        up, checkpoints = self.up, self.ctx.checkpointer
        self.serve()
        if not self.sent_final:
            # the members' done flags came after their last push (a global
            # budget's worker learns it is done at a claim): the last exchange
            self.exchange(final=True)

        def stop():
            checkpoints.relay(up, self.ctx)
            self.halt()

        up.wait_for_servers_done(stop=stop)
        self.publish(done=True)
        self.ctx.log.flush()

    def control_duties(self, view) -> None:
        self.ctx.checkpointer.relay(self.up, self.ctx)

    def halt(self) -> None:
        """Acknowledge in its global row, take GO from the global table to the group's."""
        up = self.up
        up.checkpointer.halt(up, self.state, ack=up.table.worker_offset(self.g, W.HALTED),
                             group=self.ctx)

    def state(self) -> dict:
        compressor = self.delta.compressor
        return {**super().state(), "base": self.delta.base.copy(),
                "compressor": compressor.state(),
                "since": self.since, "forwarded": self.forwarded, "exchanges": self.exchanges,
                "flushed_epochs": self.flushed_epochs, "exchange_times": list(self.exchange_times),
                "sent_final": self.sent_final, "read_versions": self.read_versions.copy(),
                "read": None if self.read is None else self.read.copy(),
                "speed_rank": self.speed_rank, "speed": self.speed.state()}

    def load_state(self, state: dict) -> None:
        super().load_state(state)   # the parameters (the delta's `params`) among them
        self.delta.base[:] = state["base"]
        self.delta.compressor.load_state(state["compressor"])
        self.since, self.forwarded = int(state["since"]), int(state["forwarded"])
        self.exchanges, self.flushed_epochs = int(state["exchanges"]), int(state["flushed_epochs"])
        self.exchange_times = [float(t) for t in state["exchange_times"]]
        # a group done before the cut sent its final exchange then: not again
        self.sent_final = bool(state["sent_final"])
        self.speed_rank = int(state["speed_rank"])
        self.speed.load_state(state["speed"])
        if "read_versions" in state:   # (older checkpoints: none)
            self.read_versions = np.asarray(state["read_versions"], dtype=np.int64)
            if self.read is not None and state["read"] is not None:
                self.read[:] = state["read"]

    def apply(self, view, waited: float) -> None:
        before = self.pushes
        super().apply(view, waited)
        self.since += self.pushes - before
        self.speed.observe(view.clocks, view.push_times)
        last = bool(view.done.all())  # other groups' rows read as done; ours now all applied
        if last or self.since >= self.k:
            self.exchange(final=last)

    def exchange(self, *, final: bool) -> None:
        ctx, up = self.ctx, self.up
        t = ctx.clock.perf_counter()
        # its slot on the global servers holds one delta: the previous one taken first
        up.wait_for_slot(self.g, self.forwarded)
        snap = up.table.read()
        rank = self._update_speed_rank(up.table.worker_rows(snap)[:, EPOCH_TIME])
        epochs = int(self.pushes // ctx.level.epoch_pushes)
        flush = final or epochs > self.flushed_epochs
        self.flushed_epochs = epochs
        compressor = self.delta.compressor
        # the paradigm decides the group's ratio as for its workers (-1: the group server)
        ratio = ctx.paradigm.compression(-1, ctx.view(), epoch=epochs + 1)
        if ratio is not None:
            compressor.set_ratio(*ratio)
        # The row first, then the pull: if every earlier delta is applied,
        # the parameters read after hold them all.
        synced = up.table.view(snap, ctx.now()).applied[self.g] >= self.forwarded
        at_pull = None   # the global servers' counts of the parameters pulled (an async rule's)
        if synced:
            up.store.pull(self.pulled)
            if self._version_cells is not None:
                at_pull = up.table.read_cells(self._version_cells).astype(np.int64)
        payload = self.delta.take(flush=flush)
        # A final exchange with no new worker push carries only the compressor's
        # residual: it counts as one forwarded push, so the global servers apply it.
        counted = self.since or int(final and compressor.sparse)
        slot = {"row": self.g, "number": self.forwarded + counted,   # the row's CLOCK after it
                "versions": self.read_versions, "read": self.read}
        if isinstance(payload, SparseGrad):
            up.store.push_sparse(payload.indices, -payload.values, **slot)
            sent = payload.nbytes
        else:
            np.negative(payload, out=self.neg)
            up.store.push(self.neg, **slot)
            sent = 4 * payload.size
        self.delta.rebase(self.pulled if synced else None, landed=self.read if synced else None)
        if at_pull is not None:   # the next delta builds on the pulled parameters with this one applied
            self.read_versions = at_pull + counted
        if synced:
            ctx.store.publish()
        pushes, self.since = self.since, 0
        self.forwarded += counted
        self.sent_final = final
        self.exchanges += 1
        duration = ctx.clock.perf_counter() - t
        self.publish_up(done=final, duration=duration, pushes=pushes)
        ctx.log.row("exchanges", group=self.g, time=ctx.now(), exchange=self.exchanges, pushes=pushes,
                    forwarded=self.forwarded, duration=duration, synced=int(synced), flushed=int(flush),
                    speed_rank=rank, ratio=getattr(compressor, "ratio", 1.0), bytes_sent=sent,
                    bytes_dense=4 * ctx.store.shard.size)

    def _update_speed_rank(self, epoch_times: np.ndarray) -> int:
        """This group's speed rank among the groups' published epoch times,
        once every group has one (until then, the rank from profiling); a
        change is published to its workers and logged."""
        if (epoch_times > 0).all():
            rank = speed_ranks(epoch_times)[self.g]
            if rank != self.speed_rank:
                self.speed_rank = rank
                self.ctx.table.write(SLOT_GROUP_SPEED_RANK, [rank])
                self.ctx.log.event(self.ctx.now(), "group_speed_rank", group=self.g,
                                   speed_rank=rank, epoch_times=epoch_times)
        return self.speed_rank

    def publish_up(self, *, done: bool, duration: float, pushes: int) -> None:
        """This group server's row in the global table (after its push is
        flushed, so a global server that sees the count sees the push)."""
        ctx = self.ctx
        now = ctx.now()
        if pushes:
            self.exchange_times = [now, self.exchange_times[0]]
        members = ctx.table.worker_rows(ctx.table.read())[self.members]
        # the progress line's wait share is the mean over these rows; extras
        # are EXCHANGES, EPOCH_TIME (0: not measured yet)
        publish_client_row(self.up.table, self.g, clock=self.forwarded, push_times=self.exchange_times,
                           busy=duration, done=done, wait_total=members[:, W.WAIT_TOTAL].mean(),
                           elapsed=members[:, W.ELAPSED].mean(), samples=members[:, W.SAMPLES].sum(),
                           extras=(self.exchanges, np.nan_to_num(self.speed.time)))
