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

from dataclasses import dataclass

from ..settings import MAX_COUNT, setting
from ..validate import ConfigError
from .base import Options, Paradigm
from .bsp import round_complete
from .gates import bounded_gate
from .steps import LocalSteps, OuterNesterov

LOCAL_MODES = ("sync", "async")


@dataclass(frozen=True)
class LocalSGDOptions(Options):
    local_steps: int = setting(8, "local steps H of each worker between pushes", low=1, high=MAX_COUNT)
    outer_lr: float = setting(0.7, "the servers' outer learning rate (1 with outer-momentum 0: model "
                                   "averaging)", low=0.0, low_open=True)
    outer_momentum: float = setting(0.5, "the outer Nesterov momentum (0: plain outer SGD)", low=0.0,
                                    high=1.0, high_open=True)
    local_mode: str = setting("sync", "sync = the servers step once all W pseudo-gradients of a round are "
                                      "in; async = each applied when it arrives", choices=LOCAL_MODES)
    delayed_nesterov: int = setting(1, "local-mode async: apply the outer momentum every N updates, plain "
                                       "SGD steps in between (1: every update)", low=1, high=MAX_COUNT)
    dylu: bool = setting(False, "local-mode async: dynamic local updates, H_i = H x v_i / max_j v_j from "
                                "measured speeds")

    def check(self) -> None:
        if self.local_mode == "sync":
            if self.dylu:
                raise ConfigError("dylu", self.dylu, "only with local_mode async (a synchronous round "
                                                     "waits for every worker)")
            if self.delayed_nesterov != 1:
                raise ConfigError("delayed_nesterov", self.delayed_nesterov, "must be 1 unless local_mode "
                                                                             "is async")

    def check_with(self, config) -> None:
        if config.budget != "global":
            raise ConfigError("budget", config.budget, "must be global with localsgd (its workers claim "
                                                       "the batches of their local steps)")
        if config.lr_schedule != "none":
            raise ConfigError("lr_schedule", config.lr_schedule, "must be none with localsgd (its inner and "
                                                                 "outer learning rates are constant)")
        if config.fail_at or config.nan_at:
            raise ConfigError("fail_at" if config.fail_at else "nan_at", config.fail_at or config.nan_at,
                              "not with localsgd (its workers take local steps)")


class LocalSGD(Paradigm):
    name = "localsgd"
    Options = LocalSGDOptions

    def __init__(self, config, num_workers: int):
        super().__init__(config, num_workers)
        self.sync = self.options.local_mode == "sync"
        self.asynchronous = not self.sync
        self.speeds: dict[int, float] = {}   # worker -> samples per second of its last push's compute

    def worker_loop(self):
        return LocalSteps()

    def update_rule(self):
        # the outer optimizer, given to the servers (as torchft's DiLoCo takes it)
        options = self.options
        return OuterNesterov(options.outer_lr, options.outer_momentum,
                             delay=1 if self.sync else options.delayed_nesterov)

    def round_samples(self) -> int:
        # a push stands for H batches: the servers count epochs, and
        # --iterations rounds, in pushes
        return self.num_workers * self.config.batch_size * self.options.local_steps

    def local_steps(self, worker, view) -> int:
        steps = self.options.local_steps
        if not self.options.dylu:
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

    def measured(self, worker, *, clock, batch, compute, transfer):
        if compute > 0:
            self.speeds[worker] = batch / compute
        return None

    def extras(self, worker, clock):
        return (self.speeds.get(worker, 0.0),)

    def state(self):
        return {"speeds": dict(self.speeds)}

    def load_state(self, state):
        self.speeds = {int(w): float(v) for w, v in state["speeds"].items()}
