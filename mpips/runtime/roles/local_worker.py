"""A Local SGD worker (paradigms/localsgd.py): from the pulled parameters, H
steps of an optimizer of its own on batches it claims, then the
pseudo-gradient w_pulled - w_i as its push (scaled 1/W by the paradigm, as
a gradient is). Its optimizer's state stays on it across rounds, and in its
checkpoints."""
from __future__ import annotations

import dataclasses

import numpy as np
import torch

from ...paradigms.base import counted
from ...training.optim import inner_optimizer
from .worker import Worker


class LocalWorker(Worker):
    def __init__(self, ctx, flat, data):
        super().__init__(ctx, flat, data)
        self.pulled = np.empty_like(flat.host_params)
        self.inner = inner_optimizer(ctx.config, flat.host_params, flat.host_grads)
        self.local_step = 0   # in all: the iterations that slowdowns and stragglers count

    def compute(self, it, batch, view):
        ctx, flat, paradigm = self.ctx, self.flat, self.ctx.config.paradigm
        steps = counted(paradigm, ctx.paradigm.local_steps, self.i, view)
        np.copyto(self.pulled, flat.host_params)
        batches, losses, seconds, slept, overrun = [], [], 0.0, 0.0, False
        while True:
            loss, spent, idle, late = self.emulated_compute(self.local_step, batch)
            self.inner.step()   # on host_params, with host_grads: the model's own memory
            self.local_step += 1
            batches.append(batch)
            losses.append(loss)
            seconds, slept, overrun = seconds + spent, slept + idle, overrun or late
            if len(batches) == steps or batch.last:
                break
            batch = self.data.take(counted(paradigm, ctx.paradigm.batch_size, self.i, view))
            if batch is None:   # the budget is spent: push what was done
                break
        np.subtract(self.pulled, flat.host_params, out=flat.host_grads)
        ctx.log.event(ctx.now(), "local_push", worker=self.i, clock=self.clock, local_steps=len(batches),
                      samples=sum(b.size for b in batches),
                      pseudo_gradient_norm=float(np.linalg.norm(flat.host_grads)))
        # The push stands for every sample of its local steps (its size: the
        # labels, concatenated); the last one, also where the budget ran out meanwhile.
        last = batch is None or batch.last
        pushed = dataclasses.replace(batches[0], y=torch.cat([b.y for b in batches]), last=last,
                                     flush=last or any(b.flush for b in batches))
        return float(np.mean(losses)), seconds, slept, overrun, pushed

    def pulled_params(self) -> np.ndarray:
        return self.pulled   # (host_params took the local steps)

    def state(self) -> dict:
        return {**super().state(), "inner": self.inner.state_dict(), "local_step": self.local_step}

    def load_state(self, state: dict) -> None:
        super().load_state(state)
        self.inner.load_state_dict(state["inner"])
        self.local_step = int(state["local_step"])
