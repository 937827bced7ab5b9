"""The server loop: watch the push counters, apply what arrived, publish, evaluate."""
from __future__ import annotations

import numpy as np

from ...paradigms.async_rules import AsyncRule, Ruled
from ...paradigms.value_staleness import UpdateNormEMA
from ..context import Context
from ..state import S

NORM_EMA_BETA = 0.9
DUE_SHARE = 0.9   # of a worker's last push interval (a gate's last wait) after which the next may land
_PUSHES, _STEPS, _PATH, _NORM_EMA, _DONE, _BEGUN = (int(c) for c in (S.PUSHES, S.STEPS, S.PATH, S.NORM_EMA,
                                                                    S.DONE, S.BEGUN))
_NS = len(S)


class Server:
    """`rule`: the update rule on this server's shard (training/optim.py)."""

    def __init__(self, ctx: Context, rule, evaluator=None):
        self.ctx = ctx
        self.s = ctx.index   # its row in the level's table (the paradigm reads it as view.server)
        self.rule = rule
        self.grad = np.zeros_like(ctx.store.shard)
        self.consumed = np.zeros(ctx.table.workers, dtype=np.int64)  # per row of the table
        self.pushes = 0                     # applied in all: consumed.sum() - dropped.sum()
        self.dropped = np.zeros(ctx.table.workers, dtype=np.int64)  # consumed, never applied (server_take)
        self.rejected = np.zeros(ctx.table.workers, dtype=np.int64)  # of those, rejected (sent nothing)
        self.steps = 0
        self.path = 0.0
        self.norm_ema = UpdateNormEMA(NORM_EMA_BETA)
        self.evaluator = evaluator          # server 0 evaluates inline (no --evaluator rank)
        cfg = ctx.config
        # each push's rule where pushes are applied alone (the clients: the rows that push here)
        self.async_rule = AsyncRule(cfg.async_rule if ctx.paradigm.asynchronous else "none", len(ctx.store.rows),
                                    dc_lambda=cfg.dc_lambda, dc_lambda0=cfg.dc_lambda0, dc_decay=cfg.dc_decay,
                                    dc_clip=cfg.dc_clip)
        self._ruled: list[tuple[int, int, Ruled]] = []   # (row, number, what the rule did) of this step
        self.next_eval = ctx.config.eval_every
        self._row = np.zeros(_NS + ctx.table.workers)   # what publish() writes

    def run(self) -> None:
        self.serve()
        self.publish(done=True)
        self.ctx.log.flush()

    def serve(self) -> None:
        """Apply pushes until every client is done and every push applied,
        stopping for the checkpoints asked for meanwhile."""
        ctx = self.ctx
        checkpoints = ctx.checkpointer
        last = {}

        def ready():
            view = ctx.view(self.s)
            if self.s == 0:
                self.control_duties(view)
            last["view"] = view
            # a checkpoint every client stopped for goes first, even before finishing
            last["halt"] = checkpoints.clients_stopped(ctx.table, ctx.table.latest)
            last["apply"] = ctx.paradigm.server_ready(view, self.consumed)
            # (arrays, not progress()'s three lists: a poll rarely finds every worker done)
            last["finished"] = bool(view.done.all()) and bool((view.clocks == self.consumed).all())
            return last["halt"] or last["apply"] or last["finished"]

        def describe():
            # the workers whose next push it waits for (one whose push is
            # here waits on this server, not the other way round)
            view = last["view"]
            behind = [j for j in range(view.num_workers)
                      if not view.done[j] and view.clocks[j] <= self.consumed[j]]
            return ctx.describe_workers(behind)

        def due():
            # each running worker's next push: its last one plus most of the
            # interval between its last two
            view = last["view"]
            latest, previous = view.push_times[:, 0], view.push_times[:, 1]
            ahead = latest + DUE_SHARE * (latest - previous) - view.now
            return ahead[~view.done & np.isfinite(ahead)]

        while True:
            waited = ctx.wait(ready, what="waiting for pushes", describe=describe, due=due,
                              changed=ctx.table.changed)
            if last["halt"]:
                self.halt()
            elif last["apply"]:
                self.apply(last["view"], waited)
            elif last["finished"]:
                break

    def control_duties(self, view) -> None:
        """Server 0, at every loop: the paradigm's table writes (Sync-Switch's
        mode, ...) and the checkpoint requests."""
        ctx = self.ctx
        for slot, value, event in ctx.paradigm.server_control(view):
            ctx.table.write(slot, [value])
            if event:
                ctx.log.event(ctx.now(), event.pop("kind", "control"), **event)
        ctx.checkpointer.maybe_request(ctx, view)
        if self.evaluator is not None:
            self.evaluator.report(ctx.table.latest)

    def halt(self) -> None:
        """Stop for the checkpoint every client stopped for (server 0 coordinates)."""
        ctx = self.ctx
        ctx.checkpointer.halt(ctx, self.state, ack=ctx.table.server_offset(self.s, S.HALTED),
                              coordinator=self.s == 0)

    def apply(self, view, waited: float) -> None:
        """Take every push counted in `view` (each client's slot holds at
        most one, summed in client order) and step once."""
        ctx = self.ctx
        t = ctx.clock.perf_counter()
        target = view.clocks.copy()
        take = ctx.paradigm.server_take(view, self.consumed)
        if take is not None:
            self.drop(view, take)
            target = np.where(take.apply, target, self.consumed)
            if not take.apply.any():
                self.publish(done=False)
                if take.wait > 0:
                    ctx.clock.sleep(take.wait)
                return
        new = int((target - self.consumed).sum())
        # A rejected push (NaN/Inf) ticks the clock and sends nothing: if they
        # are all that arrived since the last step, there is no gradient.
        rejected = view.rejected.copy()
        fresh_rejected = int(np.maximum(rejected - self.rejected, 0).sum())
        if fresh_rejected and new <= fresh_rejected:
            self.skip(target, rejected, new)
            return
        self.rejected = rejected
        ruled = self.async_rule.active and not ctx.paradigm.synchronous(view)
        ctx.store.take_gradient(self.grad, target, self.consumed, each=self.rule_push if ruled else None)
        if take is not None and take.scale != 1.0:
            self.grad *= take.scale
        rule = self.rule
        lr, momentum = ctx.paradigm.server_step(rule.schedule(ctx.epochs_of(self.pushes)),
                                                rule.base_momentum, view)
        rule.set_momentum(momentum)
        # Announce the step before it writes the parameters in place: a worker
        # measuring ||w_now - w_read|| waits for it so that the path length
        # it reads counts every step its pull may have seen (VSGD's bound).
        if ctx.paradigm.wants_exact_distance:
            ctx.table.write(ctx.table.server_offset(self.s, S.BEGUN), [self.steps + 1])
        norm = rule.step(self.grad, lr)
        self.consumed = target
        self.pushes += new
        self.steps += 1
        self.path += norm
        self.norm_ema.update(norm)
        ctx.store.publish()
        self.publish(done=False)
        # Logged by world rank: servers are ranks 0..S-1, GSSP's group servers follow.
        ctx.log.row("applies", server=ctx.rank, time=ctx.now(), wait=waited, apply=ctx.clock.perf_counter() - t,
                    pushes=new, total_pushes=self.pushes, step=self.steps, update_norm=norm, lr=lr,
                    momentum=rule.momentum)
        self.log_ruled()
        self.maybe_evaluate()

    def rule_push(self, row: int, head, push: np.ndarray, read) -> np.ndarray:
        """One push as the async rule makes it (state.sum_slots' `each`), its
        tau the pushes this server applied since the version it was read at."""
        out, ruled = self.async_rule.apply(push, tau=self.pushes - head.version, scale=head.scale,
                                           now=self.ctx.store.shard, read=read)
        self._ruled.append((row, head.number, ruled))
        return out

    def log_ruled(self) -> None:
        """A `pushes` row for each push the async rule treated in this step."""
        ctx = self.ctx
        for row, number, r in self._ruled:
            ctx.log.row("pushes", server=ctx.rank, step=self.steps, worker=row, clock=number, tau=r.tau,
                        factor=r.factor, gradient=r.gradient, compensation=r.compensation)
        self._ruled.clear()

    def drop(self, view, take) -> None:
        """Consume the pushes `take` drops, too late for their round (BSP with
        backup workers): never summed into any step, so their workers' next
        pulls do not reflect them (read-your-writes does not hold for a
        dropped push); the gates see them as consumed."""
        ctx = self.ctx
        for j in np.flatnonzero(take.drop):
            self.dropped[j] += 1
            ctx.log.event(ctx.now(), "dropped_push", server=self.s, worker=int(j), clock=int(view.clocks[j]),
                          round=int(take.rounds[j]), step=self.steps, dropped=int(self.dropped[j]),
                          note="never applied; read-your-writes does not hold for it")
        self.consumed = np.where(take.drop, view.clocks, self.consumed)

    def skip(self, target: np.ndarray, rejected: np.ndarray, new: int) -> None:
        """Every push since the last step was rejected (NaN/Inf): they count
        as applied, so that gates pass, but no step is taken, since momentum
        and weight decay alone would move the parameters without a gradient.
        The gradient window is left alone: a push landing meanwhile stays for
        the next step."""
        ctx = self.ctx
        self.consumed = target
        self.pushes += new
        self.rejected = rejected
        self.publish(done=False)
        ctx.log.event(ctx.now(), "skipped_step", server=self.s, pushes=new, total_pushes=self.pushes,
                      step=self.steps, reason="every push since the last step was rejected")
        self.maybe_evaluate()

    def maybe_evaluate(self) -> None:
        ctx = self.ctx
        if self.evaluator is not None and ctx.epochs_of(self.pushes) >= self.next_eval - 1e-9:
            self.next_eval += ctx.config.eval_every
            self.evaluator.evaluate()

    def state(self) -> dict:
        """What a checkpoint keeps of this server (taken while nothing is in flight)."""
        ctx = self.ctx
        state = {"shard": ctx.store.shard.copy(), "pending": ctx.store.pending(),
                 "optimizer": self.rule.state(), "consumed": self.consumed.copy(),
                 "rejected": self.rejected.copy(), "dropped": self.dropped.copy(), "steps": self.steps,
                 "path": self.path, "norm_ema": [self.norm_ema.value, self.norm_ema.count],
                 "next_eval": self.next_eval, "async_rule": self.async_rule.state()}
        if self.evaluator is not None:
            state["evaluator"] = self.evaluator.state()
        return state

    def load_state(self, state: dict) -> None:
        ctx = self.ctx
        ctx.store.shard[:] = state["shard"]
        ctx.store.restore_pending(state["pending"])
        ctx.store.publish()
        self.rule.load_state(state["optimizer"])
        self.consumed = np.asarray(state["consumed"], dtype=np.int64)
        self.dropped = np.asarray(state.get("dropped", self.dropped), dtype=np.int64)  # older checkpoints: none
        self.pushes = int(self.consumed.sum() - self.dropped.sum())
        self.rejected = np.asarray(state.get("rejected", self.rejected), dtype=np.int64)  # older checkpoints: none
        self.steps, self.path = int(state["steps"]), float(state["path"])
        self.norm_ema.value, self.norm_ema.count = float(state["norm_ema"][0]), int(state["norm_ema"][1])
        self.next_eval = float(state["next_eval"])
        self.async_rule.load_state(state.get("async_rule", {}))   # older checkpoints: none
        if self.evaluator is not None:
            self.evaluator.load_state(state["evaluator"])

    def publish(self, *, done: bool) -> None:
        """This server's row: counters first, then the per-worker applied counts
        that gates read (the parameters were published before)."""
        row = self._row   # (the IntEnum's values: indexing with its members is slow)
        row[_PUSHES] = self.pushes
        row[_STEPS] = self.steps
        row[_PATH] = self.path
        row[_NORM_EMA] = self.norm_ema.value
        row[_DONE] = 1.0 if done else 0.0
        row[_BEGUN] = self.steps
        row[_NS:] = self.consumed
        self.ctx.table.write(self.ctx.table.server_offset(self.s), row)
