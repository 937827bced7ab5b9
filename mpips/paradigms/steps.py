"""How a paradigm's workers and servers step, as it asks the runtime for them
(`Paradigm.worker_loop`, `Paradigm.update_rule`): plain descriptions, pure
Python; the runtime holds what runs them (mpips/runtime/roles/start.py,
mpips/training/optim.py), so it names no paradigm, and a paradigm of one's
own may ask for any of them."""
from __future__ import annotations

from dataclasses import dataclass


class WorkerLoop:
    """What a worker does between its pull and its push."""


@dataclass(frozen=True)
class GradientSteps(WorkerLoop):
    """One gradient on one batch, pushed (every paradigm but Local SGD)."""


@dataclass(frozen=True)
class LocalSteps(WorkerLoop):
    """`Paradigm.local_steps` steps of the worker's own optimizer (the
    configured one: --optimizer, --lr, --momentum), each on a batch it claims,
    then the pseudo-gradient w_pulled - w_i pushed (Local SGD, DiLoCo)."""


class UpdateRule:
    """What the servers do with the summed pushes."""


@dataclass(frozen=True)
class ConfiguredRule(UpdateRule):
    """The configured optimizer (--optimizer, --lr, --momentum, its schedule),
    as the paradigm's `server_step` adjusts it."""


@dataclass(frozen=True)
class OuterNesterov(UpdateRule):
    """DiLoCo's outer optimizer on the summed pseudo-gradients: SGD with
    Nesterov momentum (lr 1 and momentum 0: model averaging); `delay` N > 1
    is Delayed Nesterov (the momentum applied every N-th update)."""

    lr: float
    momentum: float
    delay: int = 1
