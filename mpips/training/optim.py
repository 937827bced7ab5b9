"""The servers' update rules: torch arithmetic on a shard that lives in a window.

The shard tensor shares memory with the parameter window, so a step updates
what workers pull, in place. A rule's state (momentum, Adam moments) lives
on the server, as in every production parameter server, where Sync-Switch
changes momentum in one place. A server is given its rule (after torchft's
DiLoCo, which takes its outer optimizer as an argument): the one its
paradigm asks for (`update_rule`: the configured one, or Local SGD's outer
optimizer), or `Sum` on a second level's global servers.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from ..paradigms.steps import ConfiguredRule, OuterNesterov, UpdateRule


@dataclass(frozen=True)
class Schedule:
    """The base learning rate after `epoch` epochs of updates."""

    lr: float
    kind: str = "none"          # none, step, cosine
    gamma: float = 0.1
    step_every: float = 1.0
    total_epochs: float = 1.0   # the cosine's length: the run's real budget, also under --iterations

    def __call__(self, epoch: float) -> float:
        if self.kind == "step":
            return self.lr * self.gamma ** math.floor(epoch / self.step_every)
        if self.kind == "cosine":
            return self.lr * 0.5 * (1 + math.cos(math.pi * min(epoch / self.total_epochs, 1.0)))
        return self.lr


class SGD:
    """torch.optim.SGD's update (momentum, Nesterov, weight decay) with the
    same operations in the same order (so the same numbers), without its
    per-call machinery, which is most of a step on a small model (~150 of
    ~200 us on LeNet-5, on the BSP critical path: benchmarks/overhead.py);
    its change is lr * d_p, so its norm needs no copy of the parameters."""

    def __init__(self, shard: np.ndarray, schedule: Schedule, *, momentum: float = 0.0,
                 nesterov: bool = False, weight_decay: float = 0.0):
        self.param = torch.from_numpy(shard)
        self.schedule = schedule
        self.base_momentum = self.momentum = momentum
        self.nesterov, self.weight_decay = nesterov, weight_decay
        self._buf: torch.Tensor | None = None

    def set_momentum(self, m: float) -> None:
        self.momentum = m

    def step(self, grad: np.ndarray, lr: float) -> float:
        """Apply one update from `grad`; returns the norm of the change."""
        p = self.param
        d_p = torch.from_numpy(grad)   # read only: a new tensor wherever it changes
        if self.weight_decay:
            d_p = d_p.add(p, alpha=self.weight_decay)
        m = self.momentum
        if m:
            if self._buf is None:
                self._buf = torch.clone(d_p).detach()
            else:
                self._buf.mul_(m).add_(d_p)
            d_p = d_p.add(self._buf, alpha=m) if self.nesterov else self._buf
        p.add_(d_p, alpha=-lr)
        return lr * float(torch.linalg.vector_norm(d_p))

    def state(self) -> dict:
        return {"momentum_buffer": self._buf, "momentum": self.momentum}

    def load_state(self, state: dict) -> None:
        """The momentum buffer of a checkpoint; the parameters stay the window's."""
        buf = state["momentum_buffer"]
        self._buf = None if buf is None else torch.as_tensor(buf, dtype=torch.float32).clone()
        self.momentum = float(state["momentum"])


class Sum(SGD):
    """w -= g, nothing else (no momentum, decay or schedule): on a second
    level's global servers a pushed -delta then adds delta whenever it lands."""

    def __init__(self, shard: np.ndarray):
        super().__init__(shard, Schedule(1.0))


class Outer(SGD):
    """DiLoCo's outer step on the summed pseudo-gradients (Local SGD's
    workers push (w_pulled - w_i) / W): SGD with Nesterov momentum; lr 1 and
    momentum 0 is model averaging (Local SGD). `delay` N > 1 is Delayed
    Nesterov (Liu et al. 2024): the momentum buffer takes the mean of the
    last N pseudo-gradients and is applied with every N-th update only,
    plain SGD steps in between; N = 1 is Nesterov's step."""

    def __init__(self, shard: np.ndarray, lr: float, *, momentum: float, delay: int = 1):
        super().__init__(shard, Schedule(lr), momentum=momentum, nesterov=True)
        self.delay = delay
        self.updates = 0
        # the pseudo-gradients since the buffer's last update
        self._since = torch.zeros_like(self.param) if delay > 1 else None

    def step(self, grad: np.ndarray, lr: float) -> float:
        if self.delay == 1:
            return super().step(grad, lr)
        g = torch.from_numpy(grad)
        self.updates += 1
        since = self._since
        assert since is not None   # (made when delay > 1)
        since.add_(g)
        m = self.momentum
        if self.updates % self.delay or not m:
            self.param.add_(g, alpha=-lr)
            return lr * float(torch.linalg.vector_norm(g))
        since.div_(self.delay)
        if self._buf is None:
            self._buf = since.clone()
        else:
            self._buf.mul_(m).add_(since)
        since.zero_()
        d_p = g.add(self._buf, alpha=m)
        self.param.add_(d_p, alpha=-lr)
        return lr * float(torch.linalg.vector_norm(d_p))

    def state(self) -> dict:
        return {**super().state(), "updates": self.updates, "since": self._since}

    def load_state(self, state: dict) -> None:
        super().load_state(state)
        self.updates = int(state["updates"])
        if state["since"] is not None:
            self._since = torch.as_tensor(state["since"], dtype=torch.float32).clone()


class Adam:
    """torch's Adam; its momentum is beta1 (logged, never changed).
    `momentum`: the configured one, from which a paradigm's asynchrony
    compensation scales the learning rate (base.compensated_step)."""

    def __init__(self, shard: np.ndarray, schedule: Schedule, *, momentum: float = 0.0,
                 weight_decay: float = 0.0):
        self.param = torch.from_numpy(shard)
        self.schedule = schedule
        self._grad = torch.zeros_like(self.param)
        self.param.grad = self._grad
        self._before = torch.empty_like(self.param)
        self._adam = torch.optim.Adam([self.param], lr=schedule.lr, weight_decay=weight_decay)
        self.base_momentum = momentum
        self.momentum = float(self._adam.param_groups[0]["betas"][0])
        # torch.optim's first step imports a lot (about 2 s): paid before training
        p = torch.zeros(1)
        p.grad = torch.zeros(1)
        torch.optim.Adam([p]).step()

    def set_momentum(self, m: float) -> None:
        pass

    def step(self, grad: np.ndarray, lr: float) -> float:
        self._adam.param_groups[0]["lr"] = lr
        self._grad.copy_(torch.from_numpy(grad))
        self._before.copy_(self.param)
        self._adam.step()
        self._before.sub_(self.param)
        return float(torch.linalg.vector_norm(self._before))

    def state(self) -> dict:
        return {"adam": self._adam.state_dict()}

    def load_state(self, state: dict) -> None:
        self._adam.load_state_dict(state["adam"])


def update_rule(rule: UpdateRule, config, shard: np.ndarray, *, total_epochs: float | None = None):
    """The update rule a paradigm asks for (paradigms/steps.py) on `shard`:
    the configured one, or an outer optimizer given as an object (Local SGD's;
    `optimizer` is then the workers' inner one)."""
    if isinstance(rule, OuterNesterov):
        return Outer(shard, rule.lr, momentum=rule.momentum, delay=rule.delay)
    if isinstance(rule, ConfiguredRule):
        return server_rule(config, shard, total_epochs=total_epochs)
    raise TypeError(f"no update rule runs {rule!r} (mpips/paradigms/steps.py)")


def inner_optimizer(config, params: np.ndarray, grads: np.ndarray) -> torch.optim.Optimizer:
    """A Local SGD worker's own optimizer, stepping `params` in place with
    `grads` (both host arrays): SGD with momentum, or AdamW."""
    p = torch.nn.Parameter(torch.from_numpy(params))   # shares the array's memory
    p.grad = torch.from_numpy(grads)
    if config.optimizer == "sgd":
        return torch.optim.SGD([p], lr=config.lr, momentum=config.momentum, nesterov=config.nesterov,
                               weight_decay=config.weight_decay)
    return torch.optim.AdamW([p], lr=config.lr, weight_decay=config.weight_decay)


def server_rule(config, shard: np.ndarray, *, total_epochs: float | None = None) -> SGD | Adam:
    """The configured rule on `shard`."""
    schedule = Schedule(config.lr, config.lr_schedule, config.lr_gamma, config.lr_step_every,
                        total_epochs or config.epochs)
    if config.optimizer == "sgd":
        return SGD(shard, schedule, momentum=config.momentum, nesterov=config.nesterov,
                   weight_decay=config.weight_decay)
    return Adam(shard, schedule, momentum=config.momentum, weight_decay=config.weight_decay)
