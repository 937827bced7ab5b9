"""The worker loop: gate -> pull -> forward/backward -> scale -> push -> tick -> log."""
from __future__ import annotations

import math
import sys

import numpy as np
import torch

from ..config import parse_points
from ..paradigms.base import counted
from ..paradigms.compress import make_compressor
from ..training.emulation import Slowdown
from ..training.flatmodel import FlatModel
from .context import Context
from .state import S, W, publish_client_row


class Worker:
    def __init__(self, ctx: Context, flat: FlatModel, data):
        self.ctx = ctx
        self.i = ctx.index
        self.flat = flat
        self.data = data                    # where batches come from (mpips/runtime/budget.py)
        cfg = ctx.config
        self.slowdown = Slowdown(cfg, self.i, ctx.layout.workers)
        self.fail_at = {it for w, it in parse_points(cfg.fail_at, "fail_at") if w == self.i}
        self.nan_at = {it for w, it in parse_points(cfg.nan_at, "nan_at") if w == self.i}
        self.loss_fn = ctx.loss_fn or torch.nn.CrossEntropyLoss()
        self.dense_bytes = flat.n * 4
        self.compressor = make_compressor(cfg, stream=self.i) if cfg.compressor != "none" else None
        self._read = self._now = None  # parameters as pulled / as now (exact distance)
        # what this worker has published in its control row
        self.clock = 0
        self.done = False
        self.push_times = [0.0, 0.0]
        self.rejected = 0
        self.wait_total = 0.0
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
        ctx, i = self.ctx, self.i
        last = {}

        def ready():
            view = ctx.view()
            gate = ctx.paradigm.gate(i, view)
            last["view"], last["gate"] = view, gate
            return gate.ok

        def describe():
            return ctx.describe_workers(last["gate"].waiting_for) if "gate" in last else "?"

        waited = ctx.checkpointer.wait(ctx, ready, what=f"gate at clock {self.clock}",
                                       describe=describe, stop=self.stop_for_checkpoint)
        return waited, last["view"], last["gate"]

    def stop_for_checkpoint(self) -> None:
        """At a gate, or done: take the checkpoint every rank stops for (mpips/runtime/checkpointer.py)."""
        ctx = self.ctx
        ctx.checkpointer.halt(ctx, self.state, ack=ctx.control.worker_offset(self.i, W.HALTED))

    def state(self) -> dict:
        """What a checkpoint keeps of this worker, taken at a gate."""
        return {"clock": self.clock, "push_times": list(self.push_times), "rejected": self.rejected,
                "wait_total": self.wait_total, "samples": self.samples, "data": self.data.state(),
                "overruns": self.overruns,
                "compressor": self.compressor.state() if self.compressor is not None else None}

    def load_state(self, state: dict) -> None:
        self.clock = int(state["clock"])
        self.push_times = [float(t) for t in state["push_times"]]
        self.rejected, self.samples = int(state["rejected"]), int(state["samples"])
        self.wait_total = float(state["wait_total"])
        self.overruns = int(state["overruns"])
        self.data.load_state(state["data"])
        if self.compressor is not None:
            self.compressor.load_state(state["compressor"])

    def iteration(self, it: int) -> None:
        ctx, i, flat = self.ctx, self.i, self.flat
        start = ctx.now()
        waited, view, gate = self._gate()
        self.wait_total += waited
        if gate.event:
            ctx.log.event(ctx.now(), gate.event.pop("kind", "gate"), worker=i, clock=self.clock, **gate.event)
        clock_gap = self.clock - view.c_min()
        batch = self.data.take(counted(ctx.config.paradigm, ctx.paradigm.batch_size, i, view))
        if batch is None:   # the budget is spent: done, without a push
            self.done = True
            self.publish()
            return

        clock = ctx.clock
        t = clock.perf_counter()
        ctx.store.pull(flat.host_params)   # to the GPU in compute_gradient
        read_updates, read_path = view.updates, view.path_length
        if ctx.paradigm.wants_exact_distance:
            self._read = flat.host_params.copy()
        pull_time = clock.perf_counter() - t

        if it in self.fail_at:
            raise RuntimeError(f"injected failure (fail_at) at worker {i} iteration {it}")
        for s in self.slowdown.starting(it):
            ctx.log.event(ctx.now(), "straggler", worker=i, iteration=it, iterations=s.length, factor=s.factor)
        loss_value, compute, sleep, overrun = self.emulated_compute(it, batch)

        t = clock.perf_counter()
        if ctx.paradigm.wants_exact_distance:
            distance = self._distance_moved()
            at_push = self._view_counting_steps_seen()
        else:
            distance, at_push = math.nan, ctx.view()
        decision = ctx.paradigm.push(i, at_push, batch_size=batch.size, read_updates=read_updates,
                                     read_path_length=read_path, distance=distance)
        grad = flat.host_grads
        if it in self.nan_at:
            grad[0] = np.nan
        if decision.scale != 1.0:
            grad *= decision.scale
        rejected = not np.isfinite(grad).all()
        sent = 0
        if rejected:
            self.rejected += 1
            ctx.log.event(ctx.now(), "rejected_push", worker=i, iteration=it, clock=self.clock,
                          reason="gradient contains NaN or Inf")
        else:
            if self.compressor is not None:
                ratio = ctx.paradigm.compression(i, at_push, epoch=batch.epoch)
                if ratio is not None:
                    self.compressor.set_ratio(*ratio)
            # The residual goes out in full at every epoch end and with the last push.
            # A gate that saw all of this worker's pushes applied (read-your-writes:
            # every built-in one) left its slot free: no read to check it again.
            sent = self._send(grad, epoch_end=batch.flush, key=batch.start,
                              slot_free=view.applied_to(i) >= self.clock)
            self.samples += batch.size
        push_time = clock.perf_counter() - t
        event = ctx.paradigm.measured(i, clock=self.clock, batch=batch.size, compute=compute)
        if event:
            ctx.log.event(ctx.now(), event.pop("kind", "measured"), worker=i, **event)
        self.done = batch.last
        self.clock += 1
        self.push_times = [ctx.now(), self.push_times[0]]
        self.busy = pull_time + compute + push_time
        self.publish()

        staleness = at_push.updates - read_updates
        vs = decision.info.get("value_staleness", math.nan)
        vsb = decision.info.get("value_staleness_bound", math.nan)
        ctx.log.row("iterations", i, it, self.clock - 1, clock_gap, start, waited, pull_time,
                    compute, sleep, push_time, batch.size, decision.scale, decision.lr_scale,
                    staleness, vs, vsb, sent, self.dense_bytes, loss_value, int(rejected),
                    batch.start, int(overrun), self.h2d, self.d2h)

    def emulated_compute(self, it: int, batch) -> tuple[float, float, float, bool]:
        """The real forward/backward, then the emulated device's time slept
        out (mpips/training/emulation.py); returns (loss, seconds in all, of them slept,
        overrun: the real compute alone took longer than the model allows,
        so this iteration is not emulated faithfully)."""
        clock = self.ctx.clock
        began = clock.perf_counter()
        loss_value, compute = self.compute_gradient(batch.x, batch.y)
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

    def _send(self, grad: np.ndarray, *, epoch_end: bool, key: int = 0, slot_free: bool = False) -> int:
        """Push `grad`, compressed if configured, into this worker's slot on
        the servers, once they took its earlier pushes (known already when
        `slot_free`); returns the payload bytes."""
        ctx = self.ctx
        if not slot_free:
            ctx.wait_for_slot(self.i, self.clock)
        # numbered with the clock that will count it; servers sum by where the
        # batch starts in the global stream (-1 under a per-worker budget: by worker)
        slot = {"row": self.i, "number": self.clock + 1, "key": key}
        if self.compressor is None:
            ctx.store.push(grad, **slot)
            return self.dense_bytes
        payload = self.compressor.compress(grad)
        if epoch_end:
            # Error feedback: what top-k held back is sent in full once per epoch.
            payload = payload.to_dense() if hasattr(payload, "to_dense") else payload
            payload = payload + self.compressor.flush()
        if isinstance(payload, np.ndarray):
            ctx.store.push(payload, **slot)
            return self.dense_bytes
        ctx.store.push_sparse(payload.indices, payload.values, **slot)
        return int(payload.nbytes)

    def _distance_moved(self) -> float:
        """||w_now - w_read||: one extra pull, for paradigms that ask for it."""
        if self._now is None:
            self._now = np.empty_like(self.flat.host_params)
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
        begun = ctx.control.server_rows(ctx.control.read())[:, S.BEGUN].copy()

        steps = [ctx.control.server_offset(s, S.STEPS) for s in range(ctx.control.servers)]

        def published():
            return bool((ctx.control.read_cells(steps) >= begun).all())

        def describe():
            steps = ctx.control.server_rows(ctx.control.read())[:, S.STEPS]
            ranks = ctx.layout.server_ranks
            return ", ".join(f"server {s} = rank {ranks[s]} (step {int(begun[s])} begun, "
                             f"{int(steps[s])} published)"
                             for s in np.flatnonzero(steps < begun))

        ctx.wait(published, what="servers finishing a step", describe=describe)
        return ctx.view()  # read again: the path follows STEPS in the row's one write

    def publish(self) -> None:
        """Publish this worker's row, after its push is flushed, so a server
        that sees the new clock also sees the push it counts."""
        ctx = self.ctx
        publish_client_row(ctx.control, self.i, clock=self.clock, push_times=self.push_times,
                           busy=self.busy, done=self.done, rejected=self.rejected,
                           wait_total=self.wait_total, elapsed=ctx.now(), samples=self.samples,
                           extras=ctx.paradigm.extras(self.i, self.clock))
