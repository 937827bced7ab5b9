"""The servers' optimizer: torch.optim over a shard that lives in an RMA window.

The shard tensor shares memory with the parameter window, so a step updates
what workers pull, in place. Optimizer state (momentum, Adam moments) lives
here, on the server, where Sync-Switch changes momentum in one place.
"""
from __future__ import annotations

import math

import numpy as np
import torch


def _warm_up(kind: str) -> None:
    """torch.optim's first step imports a lot (about 2 s); pay it before training."""
    p = torch.zeros(1)
    p.grad = torch.zeros(1)
    (torch.optim.SGD([p], lr=0.1, momentum=0.9) if kind == "sgd" else torch.optim.Adam([p])).step()


class ServerOptimizer:
    """SGD (momentum, Nesterov, weight decay) written out, or torch's Adam.

    SGD is torch.optim.SGD's update with the same operations in the same
    order (so the same numbers), without its per-call machinery, which is
    most of a step on a small model (~150 of ~200 us on LeNet-5, on the BSP
    critical path: benchmarks/overhead.py); its change is lr * d_p, so its
    norm needs no copy of the parameters either.
    """

    def __init__(self, config, shard: np.ndarray, *, total_epochs: float | None = None):
        self.config = config
        # the cosine schedule's length: the run's real budget, also under --iterations
        self.total_epochs = total_epochs or config.epochs
        self.param = torch.from_numpy(shard)
        self.momentum = config.momentum if config.optimizer == "sgd" else 0.0
        self._buf: torch.Tensor | None = None          # SGD's momentum buffer
        self._adam = None
        if config.optimizer != "sgd":
            _warm_up(config.optimizer)
            self._grad = torch.zeros_like(self.param)
            self.param.grad = self._grad
            self._before = torch.empty_like(self.param)
            self._adam = torch.optim.Adam([self.param], lr=config.lr, weight_decay=config.weight_decay)
            self.momentum = float(self._adam.param_groups[0]["betas"][0])

    def set_momentum(self, m: float) -> None:
        if self._adam is None:
            self.momentum = m

    def scheduled_lr(self, epoch: float) -> float:
        """The base learning rate after `epoch` epochs of updates."""
        c = self.config
        if c.lr_schedule == "step":
            return c.lr * c.lr_gamma ** math.floor(epoch / c.lr_step_every)
        if c.lr_schedule == "cosine":
            return c.lr * 0.5 * (1 + math.cos(math.pi * min(epoch / self.total_epochs, 1.0)))
        return c.lr

    def step(self, grad: np.ndarray, lr: float) -> float:
        """Apply one update from `grad`; returns the norm of the change."""
        if self._adam is not None:
            self._adam.param_groups[0]["lr"] = lr
            self._grad.copy_(torch.from_numpy(grad))
            self._before.copy_(self.param)
            self._adam.step()
            self._before.sub_(self.param)
            return float(torch.linalg.vector_norm(self._before))
        c, p = self.config, self.param
        d_p = torch.from_numpy(grad)   # read only: a new tensor wherever it changes
        if c.weight_decay:
            d_p = d_p.add(p, alpha=c.weight_decay)
        m = self.momentum
        if m:
            if self._buf is None:
                self._buf = torch.clone(d_p).detach()
            else:
                self._buf.mul_(m).add_(d_p)
            d_p = d_p.add(self._buf, alpha=m) if c.nesterov else self._buf
        p.add_(d_p, alpha=-lr)
        return lr * float(torch.linalg.vector_norm(d_p))

    def state(self) -> dict:
        if self._adam is not None:
            return {"adam": self._adam.state_dict()}
        return {"momentum_buffer": self._buf, "momentum": self.momentum}

    def load_state(self, state: dict) -> None:
        """Momentum buffer / Adam moments of a checkpoint; the parameters stay the window's."""
        if self._adam is not None:
            self._adam.load_state_dict(state["adam"])
            return
        buf = state["momentum_buffer"]
        self._buf = None if buf is None else torch.as_tensor(buf, dtype=torch.float32).clone()
        self.momentum = float(state["momentum"])
