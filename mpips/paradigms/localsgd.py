"""Local SGD and DiLoCo (Stich 2019; Douillard et al. 2023): each worker
takes H steps of its own optimizer from the pulled parameters, then pushes
the pseudo-gradient (w_pulled - w_i) / W; the servers apply an outer
Nesterov step to their sum (training/optim.Outer).

`local_mode` sync: BSP over rounds of H local steps (the servers step once
all W pseudo-gradients of a round are in). async (Liu et al. 2024): each is
applied when it arrives, read-your-writes as everywhere; with `dylu`, worker
i takes H_i = H x v_i / max_j v_j local steps, v from the speeds the workers
publish (samples per second of compute), so all push at about the same
interval; `delayed_nesterov` is the outer rule's.
"""
from __future__ import annotations

from .base import Paradigm
from .bsp import round_complete
from .gates import bounded_gate


class LocalSGD(Paradigm):
    name = "localsgd"
    local_sgd = True

    def __init__(self, config, num_workers: int):
        super().__init__(config, num_workers)
        self.sync = config.local_mode == "sync"
        self.asynchronous = not self.sync
        self.speeds: dict[int, float] = {}   # worker -> samples per second of its last push's compute

    def round_samples(self) -> int:
        # a push stands for H batches: the servers count epochs, and
        # --iterations rounds, in pushes
        return self.num_workers * self.config.batch_size * self.config.local_steps

    def local_steps(self, worker, view) -> int:
        steps = self.config.local_steps
        if not self.config.dylu:
            return steps
        speeds = view.extras[:, 0]
        if not (speeds > 0).all():
            return steps   # until every worker has measured its speed
        return max(1, int(round(steps * speeds[worker] / speeds.max())))

    def gate(self, worker, view):
        # BSP's, or read-your-writes
        return bounded_gate(worker, view, 0) if self.sync else super().gate(worker, view)

    def server_ready(self, view, consumed):
        return round_complete(view, consumed) if self.sync else super().server_ready(view, consumed)

    def synchronous(self, view):
        return self.sync

    def server_step(self, lr, momentum, view):
        # the outer rule's own: asynchrony's momentum compensation is for gradients
        return lr, momentum

    def measured(self, worker, *, clock, batch, compute):
        if compute > 0:
            self.speeds[worker] = batch / compute
        return None

    def extras(self, worker, clock):
        return (self.speeds.get(worker, 0.0),)

    def state(self):
        return {"speeds": dict(self.speeds)}

    def load_state(self, state):
        self.speeds = {int(w): float(v) for w, v in state["speeds"].items()}
