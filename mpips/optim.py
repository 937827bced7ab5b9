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
    def __init__(self, config, shard: np.ndarray, *, total_epochs: float | None = None):
        _warm_up(config.optimizer)
        self.config = config
        # the cosine schedule's length: the run's real budget, also under --iterations
        self.total_epochs = total_epochs or config.epochs
        self.param = torch.from_numpy(shard)
        self._grad = torch.zeros_like(self.param)
        self.param.grad = self._grad
        self._before = torch.empty_like(self.param)
        if config.optimizer == "sgd":
            self.opt = torch.optim.SGD([self.param], lr=config.lr, momentum=config.momentum,
                                       nesterov=config.nesterov and config.momentum > 0,
                                       weight_decay=config.weight_decay)
        else:
            self.opt = torch.optim.Adam([self.param], lr=config.lr, weight_decay=config.weight_decay)

    @property
    def lr(self) -> float:
        return float(self.opt.param_groups[0]["lr"])

    @property
    def momentum(self) -> float:
        g = self.opt.param_groups[0]
        return float(g.get("momentum", g.get("betas", (0.0,))[0]))

    def set_momentum(self, m: float) -> None:
        g = self.opt.param_groups[0]
        if "momentum" in g:
            g["momentum"] = m

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
        self.opt.param_groups[0]["lr"] = lr
        self._grad.copy_(torch.from_numpy(grad))
        self._before.copy_(self.param)
        self.opt.step()
        self._before.sub_(self.param)
        return float(torch.linalg.vector_norm(self._before))

    def state(self) -> dict:
        return self.opt.state_dict()

    def load_state(self, state: dict) -> None:
        """Momentum buffers / Adam moments of a checkpoint; the parameters stay the window's."""
        self.opt.load_state_dict(state)
