"""The worker loop: gate -> pull -> forward/backward -> scale -> push -> tick -> log."""
from __future__ import annotations

import math
import sys

import numpy as np
import torch

from ...config import parse_points
from ...paradigms.base import counted
from ...paradigms.compress import make_compressor
from ...training.emulation import Slowdown
from ...training.flatmodel import FlatModel
from ..context import Context
from ..state import S, W, publish_client_row
from .server import DUE_SHARE


class Worker:
    def __init__(self, ctx: Context, flat: FlatModel, data):
        self.ctx = ctx
        self.i = ctx.index
        self.flat = flat
        self.data = data                    # where batches come from (mpips/runtime/roles/budget.py)
        cfg = ctx.config
        self.slowdown = Slowdown(cfg, self.i, ctx.layout.workers)
        self.loss_fn = ctx.plan.loss_fn or torch.nn.CrossEntropyLoss()
        self.dense_bytes = flat.n * 4
        self.compressor = make_compressor(cfg, stream=self.i)
        # parameters as pulled / as now (exact distance)
        self._read: np.ndarray | None = None
        self._now: np.ndarray | None = None
        # per server, the pushes applied to the parameters last pulled (sent
        # with the push: an async rule's tau), where a rule treats pushes applied alone
        self.versions: np.ndarray | None = None
        ruled = ctx.paradigm.asynchronous and cfg.async_rule != "none"
        self._version_cells = [ctx.table.server_offset(s, S.PUSHES) for s in range(ctx.table.servers)] \
            if ruled else None
        # what this worker has published in its control row
        self.clock = 0
        self.done = False
        self.push_times = [0.0, 0.0]
        self.rejected = 0
        self.wait_total = 0.0
        self.last_wait = 0.0              # seconds at the last gate
        self.samples = 0
        self.overruns = 0
        self.busy = 0.0                   # of the last iteration
        self.h2d = self.d2h = 0.0         # seconds of the last compute copying to and from a GPU

    # ------------------------------------------------------------------
    def run(self) -> None:
        ctx = self.ctx
        if self.slowdown.persistent != 1.0:
            ctx.log.event(ctx.now(), "slowdown", worker=self.i, factor=self.slowdown.persistent)
        while not self.done:    # resumed from a checkpoint: clock > 0
            self.iteration(self.clock)
        ctx.log.flush()

    def _gate(self):
        """Wait at the gate; (seconds waited, the view it passed on)."""
        ctx, i = self.ctx, self.i
        last = {}

        def ready():
            view = ctx.view()
            gate = ctx.paradigm.gate(i, view)
            if not gate.ok:
                ctx.level.watch_gate(view, gate)
            last["view"], last["gate"] = view, gate
            return gate.ok

        def describe():
            return ctx.describe_workers(last["gate"].waiting_for) if "gate" in last else "?"

        # when it should open: after most of the last gate's wait; polled
        # finely from then on, and never later than without (wait.next_sleep)
        clock, expected = ctx.clock, DUE_SHARE * self.last_wait
        began = clock.perf_counter()

        def due():
            return expected - (clock.perf_counter() - began)

        waited = ctx.checkpointer.wait(ctx, ready, what=f"gate at clock {self.clock}",
                                       describe=describe, stop=self.stop_for_checkpoint, due=due)
        self.last_wait = waited
        self.wait_total += waited
        event = last["gate"].event
        if event:
            ctx.log.event(ctx.now(), event.pop("kind", "gate"), worker=i, clock=self.clock, **event)
        return waited, last["view"]

    def stop_for_checkpoint(self) -> None:
        """At a gate, or done: take the checkpoint every rank stops for (mpips/runtime/recovery/checkpointer.py)."""
        ctx = self.ctx
        ctx.checkpointer.halt(ctx, self.state, ack=ctx.table.worker_offset(self.i, W.HALTED))

    def state(self) -> dict:
        """What a checkpoint keeps of this worker, taken at a gate."""
        return {"clock": self.clock, "push_times": list(self.push_times), "rejected": self.rejected,
                "wait_total": self.wait_total, "samples": self.samples, "data": self.data.state(),
                "overruns": self.overruns,
                "compressor": self.compressor.state()}

    def load_state(self, state: dict) -> None:
        self.clock = int(state["clock"])
        self.push_times = [float(t) for t in state["push_times"]]
        self.rejected, self.samples = int(state["rejected"]), int(state["samples"])
        self.wait_total = float(state["wait_total"])
        self.overruns = int(state["overruns"])
        self.data.load_state(state["data"])
        self.compressor.load_state(state["compressor"])

    def iteration(self, it: int) -> None:
        """One iteration, phase by phase: gate, claim, pull, compute, decide,
        send, tick, record."""
        ctx, clock = self.ctx, self.ctx.clock
        start = ctx.now()
        waited, view = self._gate()
        batch = self.data.take(counted(ctx.config.paradigm, ctx.paradigm.batch_size, self.i, view))
        if batch is None:   # the budget is spent: done, without a push
            self.done = True
            self.publish()
            return
        t = clock.perf_counter()
        read_updates, read_path = self._pull(view)
        pull_time = clock.perf_counter() - t
        loss, compute, slept, overrun, batch = self.compute(it, batch, view)
        t = clock.perf_counter()
        at_push, decision = self._decide(batch, read_updates, read_path)
        sent = self._send(it, batch, view, at_push, decision.scale)
        push_time = clock.perf_counter() - t
        self._tick(batch, pull_time + compute + push_time, compute)
        ctx.log.row("iterations", worker=self.i, iteration=it, clock=self.clock - 1,
                    clock_gap=self.clock - 1 - view.c_min(), start=start, wait=waited, pull=pull_time,
                    compute=compute, slowdown=slept, push=push_time, batch=batch.size, scale=decision.scale,
                    lr_scale=decision.lr_scale, staleness=at_push.updates - read_updates,
                    value_staleness=decision.info.get("value_staleness", math.nan),
                    value_staleness_bound=decision.info.get("value_staleness_bound", math.nan),
                    bytes_sent=sent or 0, bytes_dense=self.dense_bytes, loss=loss, rejected=int(sent is None),
                    sample=batch.start, overrun=int(overrun), h2d=self.h2d, d2h=self.d2h)

    def _pull(self, view) -> tuple[int, float]:
        """The parameters; the updates and path length it holds at least."""
        ctx, flat = self.ctx, self.flat
        ctx.store.pull(flat.host_params)
        if self._version_cells is not None:
            # read after the pull: a server publishes its count after the step
            # it counts (in the simulator the two are one instant: exact)
            self.versions = ctx.table.read_cells(self._version_cells).astype(np.int64)
        if ctx.paradigm.wants_exact_distance:
            self._read = flat.host_params.copy()
        return view.updates, view.path_length

    def _decide(self, batch, read_updates: int, read_path: float):
        """(the view the paradigm saw, its decision for this push)."""
        ctx = self.ctx
        if ctx.paradigm.wants_exact_distance:
            distance = self._distance_moved()
            at_push = self._view_counting_steps_seen()
        else:
            distance, at_push = math.nan, ctx.view()
        return at_push, ctx.paradigm.push(self.i, at_push, batch_size=batch.size, read_updates=read_updates,
                                          read_path_length=read_path, distance=distance)

    def _send(self, it: int, batch, view, at_push, scale: float) -> int | None:
        """The gradient scaled and pushed, compressed, into this worker's slot; the
        bytes sent (the payload, and DC's read parameters), or None where it
        held a NaN or an Inf (rejected, never sent)."""
        ctx, grad = self.ctx, self.flat.host_grads
        if scale != 1.0:
            grad *= scale
        if not np.isfinite(grad).all():
            self.rejected += 1
            ctx.log.event(ctx.now(), "rejected_push", worker=self.i, iteration=it, clock=self.clock,
                          reason="gradient contains NaN or Inf")
            return None
        ratio = ctx.paradigm.compression(self.i, at_push, epoch=batch.epoch)
        if ratio is not None:
            self.compressor.set_ratio(*ratio)
        # A gate that saw all of this worker's pushes applied (read-your-writes:
        # every built-in one) left its slot free: no read to check it again.
        if view.applied_to(self.i) < self.clock:
            ctx.wait_for_slot(self.i, self.clock)
        self.samples += batch.size
        # numbered with the clock that will count it; servers sum by where the
        # batch starts in the global stream (-1 under a per-worker budget: by worker)
        slot = {"row": self.i, "number": self.clock + 1, "key": batch.start, "versions": self.versions,
                "scale": scale, "read": self.pulled_params() if ctx.store.reads else None}
        payload = self.compressor.compress(grad)
        if batch.flush and self.compressor.sparse:
            # Error feedback: what top-k held back goes out in full at every
            # epoch end and with the last push (a dense one holds nothing back).
            payload = payload.to_dense() if hasattr(payload, "to_dense") else payload
            payload = payload + self.compressor.flush()
        # DC's parameters read (an async rule's) travel with the push, where it has values: their bytes too
        reads = slot["read"] is not None
        if isinstance(payload, np.ndarray):
            ctx.store.push(payload, **slot)
            return self.dense_bytes * (2 if reads else 1)
        ctx.store.push_sparse(payload.indices, payload.values, **slot)
        return int(payload.nbytes) + (4 * len(payload.indices) if reads else 0)

    def _tick(self, batch, busy: float, compute: float) -> None:
        """Count the push and publish this worker's row."""
        ctx = self.ctx
        event = ctx.paradigm.measured(self.i, clock=self.clock, batch=batch.size, compute=compute,
                                      transfer=busy - compute)
        if event:
            ctx.log.event(ctx.now(), event.pop("kind", "measured"), worker=self.i, **event)
        self.done = batch.last
        self.clock += 1
        self.push_times = [ctx.now(), self.push_times[0]]
        self.busy = busy
        self.publish()

    def compute(self, it: int, batch, view):
        """What is pushed, computed from the pulled parameters: here the
        gradient of `batch` (runtime/roles/local_worker.py: local steps); (loss,
        seconds, of them slept, overrun, the batch the push stands for)."""
        return (*self.emulated_compute(it, batch), batch)

    def pulled_params(self) -> np.ndarray:
        """The parameters the push was computed on, as pulled."""
        return self.flat.host_params

    def emulated_compute(self, it: int, batch) -> tuple[float, float, float, bool]:
        """The real forward/backward, then the emulated device's time slept
        out (mpips/training/emulation.py); returns (loss, seconds in all, of them slept,
        overrun: the real compute alone took longer than the model allows,
        so this iteration is not emulated faithfully)."""
        ctx, clock = self.ctx, self.ctx.clock
        for s in self.slowdown.starting(it):
            ctx.log.event(ctx.now(), "straggler", worker=self.i, iteration=it, iterations=s.length, factor=s.factor)
        began = clock.perf_counter()
        gradients = self.ctx.services.gradients
        if gradients is None:
            loss_value, compute = self.compute_gradient(batch.x, batch.y)
        else:   # in virtual time, no time (as compute_gradient's there); computed once first needed
            pending, compute = gradients.submit(self.flat, batch.x, batch.y), 0.0
        target = self.slowdown.target(it, batch.size, compute)
        overrun = self.slowdown.device_time is not None and compute > target
        if overrun:
            self.overruns += 1
            if self.overruns == 1:
                print(f"mpips: {self.ctx.name}: real compute {1e3 * compute:.1f} ms exceeds the emulated "
                      f"device time {1e3 * target:.1f} ms at iteration {it}: the emulation is not faithful "
                      f"(overruns are counted in the log; raise --device-time)", file=sys.stderr, flush=True)
        remaining = began + target - clock.perf_counter()
        if remaining > 0:
            clock.sleep(remaining)
        elapsed = clock.perf_counter() - began
        if gradients is not None:
            loss_value = pending.result()
        return loss_value, elapsed, max(0.0, elapsed - compute), overrun

    def compute_gradient(self, x: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
        """Forward/backward on one batch at the pulled parameters into the
        flat gradient (host side); returns (loss, seconds). On a GPU the
        seconds of the copies to it and back are kept in self.h2d, self.d2h."""
        flat, clock = self.flat, self.ctx.clock
        t = clock.perf_counter()
        flat.params_from_host()
        x, y = x.to(flat.device, non_blocking=True), y.to(flat.device, non_blocking=True)
        flat.synchronize()
        copied = clock.perf_counter()
        flat.zero_grad()
        loss = self.loss_fn(flat.model(x), y)
        loss.backward()
        flat.check_grad_views()
        loss_value = float(loss.detach())   # waits for the backward pass as well (one stream)
        computed = clock.perf_counter()
        flat.grads_to_host()
        end = clock.perf_counter()
        if flat.device.type != "cpu":
            self.h2d, self.d2h = copied - t, end - computed
        return loss_value, end - t

    def _distance_moved(self) -> float:
        """||w_now - w_read||: one extra pull, for paradigms that ask for it."""
        if self._now is None:
            self._now = np.empty_like(self.flat.host_params)
        assert self._read is not None   # (kept at every pull when wants_exact_distance)
        self.ctx.store.pull(self._now)
        self._now -= self._read
        return float(np.linalg.norm(self._now))

    def _view_counting_steps_seen(self):
        """A view, read after the distance pull, whose path length counts every
        step that pull may have seen: a server raises BEGUN before a step
        writes the parameters and publishes STEPS and PATH after, so wait for
        the steps begun by now. The view's path is then an upper bound of the
        distance (the pull side is safe already: the path read before a pull
        counts only steps fully written)."""
        ctx = self.ctx
        begun = ctx.table.server_rows(ctx.table.read())[:, S.BEGUN].copy()

        steps = [ctx.table.server_offset(s, S.STEPS) for s in range(ctx.table.servers)]

        def published():
            return bool((ctx.table.read_cells(steps) >= begun).all())

        def describe():
            steps = ctx.table.server_rows(ctx.table.read())[:, S.STEPS]
            ranks = ctx.layout.server_ranks
            return ", ".join(f"server {s} = {ctx.rank_name(ranks[s])} (step {int(begun[s])} begun, "
                             f"{int(steps[s])} published)"
                             for s in np.flatnonzero(steps < begun))

        ctx.wait(published, what="servers finishing a step", describe=describe)
        return ctx.view()  # read again: the path follows STEPS in the row's one write

    def publish(self) -> None:
        """Publish this worker's row, after its push is flushed, so a server
        that sees the new clock also sees the push it counts."""
        ctx = self.ctx
        publish_client_row(ctx.table, self.i, clock=self.clock, push_times=self.push_times,
                           busy=self.busy, done=self.done, rejected=self.rejected,
                           wait_total=self.wait_total, elapsed=ctx.now(), samples=self.samples,
                           extras=ctx.paradigm.extras(self.i, self.clock))


class FaultyWorker(Worker):
    """A worker that fails where the testing options `fail_at` (raises
    before the compute) and `nan_at` (a NaN gradient) say (roles.start_role)."""

    def __init__(self, ctx: Context, flat: FlatModel, data):
        super().__init__(ctx, flat, data)
        cfg = ctx.config
        self.fail_at = {it for w, it in parse_points(cfg.fail_at, "fail_at") if w == self.i}
        self.nan_at = {it for w, it in parse_points(cfg.nan_at, "nan_at") if w == self.i}

    def compute(self, it: int, batch, view):
        """What is pushed, computed from the pulled parameters: here the
        gradient of `batch` (runtime/roles/local_worker.py: local steps); (loss,
        seconds, of them slept, overrun, the batch the push stands for)."""
        return (*self.emulated_compute(it, batch), batch)

    def emulated_compute(self, it: int, batch):
        if it in self.fail_at:
            raise RuntimeError(f"injected failure (fail_at) at worker {self.i} iteration {it}")
        result = super().emulated_compute(it, batch)
        if it in self.nan_at:
            self.flat.host_grads[0] = np.nan
        return result
