"""The paradigm interface: pure Python, never imports mpi4py.

A paradigm answers questions about a read-only `ClusterView` (a snapshot of
the control window). The runtime asks, moves the bytes, and logs the answers.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from numbers import Integral
from typing import Any, Callable, ClassVar

import numpy as np

from ..validate import ConfigError
from .gates import Gate, own_writes_gate
from .steps import ConfiguredRule, GradientSteps, UpdateRule, WorkerLoop
from .view import ClusterView


def iterations_per_epoch(num_train: int, num_workers: int, batch_size: int) -> int:
    """Iterations per epoch, the same for every worker so BSP rounds line up.

    Based on the smallest shard, so no worker goes past its epoch boundary.
    (Here, not in mpips.training.data, so that paradigms import neither torch nor mpi4py.)
    """
    if num_train < num_workers or num_workers < 1 or batch_size < 1:
        raise ValueError(f"cannot split {num_train} samples over {num_workers} workers "
                         f"in batches of {batch_size}")
    return max(1, (num_train // num_workers) // batch_size)


def compensated_momentum(momentum: float, workers: int) -> float:
    """Explicit momentum when W workers' pushes are applied one at a time.
    Asynchrony itself acts as momentum of about 1 - 1/W (Mitliagkas et al.
    2016, "Asynchrony begets momentum"); keeping the configured momentum on
    top of it made ASP with 8 workers oscillate (digits, 10 epochs, 3 seeds:
    final 0.74, 0.94, 0.90 with m = 0.9). The explicit part that leaves the
    total at m is 1 - W (1 - m), at least 0: 0.2 for m = 0.9 and 8 workers;
    m itself for one worker, so one worker stays exactly sequential SGD."""
    return max(0.0, 1.0 - workers * (1.0 - momentum))


def compensated_step(lr: float, momentum: float, new_momentum: float) -> tuple[float, float]:
    """(lr', new_momentum) with the same step per unit of gradient in the
    long run, lr / (1 - m): less momentum is not a smaller step (with
    m = 0.2 at the same lr, ASP with 8 workers reached only 0.44-0.69)."""
    return lr * (1.0 - new_momentum) / (1.0 - momentum), new_momentum


def counted(paradigm: str, hook: Callable[..., Any], *args, least: int = 1) -> int:
    """hook(*args), a count the runtime sizes or divides by (batch_size,
    round_samples, iterations_per_epoch, group_servers), as an integer >=
    `least`; else a ConfigError naming the paradigm, the hook and the value
    (a plugin's batch size of 0 ended in a torch.cat traceback, a round of 0
    samples in ZeroDivisionError, -1 iterations per epoch in epoch -1.00)."""
    value = hook(*args)
    if isinstance(value, bool) or not isinstance(value, Integral) or value < least:
        raise ConfigError("paradigm", paradigm, f"its {hook.__name__}() returned {value!r}, "
                                                f"not an integer >= {least}")
    return int(value)


@dataclass(frozen=True)
class Options:
    """A paradigm's own settings: a subclass declares them as fields made by
    `mpips.settings.setting` (default, help, allowed values, bounds), and the
    flags, YAML keys, `mpips.train` keywords and `mpips compare` entries are
    made from it. The configuration (`Config.options`) holds the selected
    paradigm's, each checked against its declaration; these hooks add the
    checks that involve several settings or the number of workers."""

    def check(self) -> None:
        """A ConfigError naming the setting unless these options go together
        (DSSP's s_H >= s_L); also run on another paradigm's options a
        configuration is given (a comparison's shared flags)."""

    def check_with(self, config) -> None:
        """A ConfigError naming the setting unless these options go with the
        shared settings `config` (e.g. Local SGD's budget must be global)."""

    def check_workers(self, workers: int) -> None:
        """A ConfigError naming the setting unless these options suit `workers` workers."""


@dataclass
class Push:
    """What the paradigm decides for one push: the factor the gradient is
    multiplied by before it is pushed, and why."""

    scale: float = 1.0
    lr_scale: float = 1.0                       # logged: learning-rate scale of this push
    info: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Take:
    """What a server does with the pushes waiting for it (`Paradigm.server_take`):
    `apply` (W,) bool, the workers whose waiting push goes into this step;
    `drop` (W,) bool, the workers whose waiting push is consumed and never
    applied (too late for its round); `rounds` (W,), the round each waiting
    push was computed for (logged with a drop); `scale`, the factor of the
    summed pushes; `wait`, seconds to wait before deciding again (nothing
    applied meanwhile)."""

    apply: np.ndarray
    drop: np.ndarray
    rounds: np.ndarray
    scale: float = 1.0
    wait: float = 0.0


class Paradigm:
    """Base class. Subclasses override what differs from plain ASP, and
    declare their own settings as `Options` (a frozen dataclass; the
    configuration's `options` is an instance of it, read here as `self.options`)."""

    name = "base"
    Options: ClassVar[type[Options]] = Options
    wants_exact_distance = False   # the worker measures ||w_now - w_read|| for push()
    # Some pushes are applied as they arrive, each on parameters it was not
    # computed on: the servers apply `async_rule` to them (not within a
    # synchronous round: `synchronous`), and a DC rule's pushes carry their read.
    asynchronous = True

    def __init__(self, config, num_workers: int):
        self.config = config
        self.num_workers = num_workers
        self.iterations = 0   # per worker; set by the runtime before the first gate
        self.options = config.options   # this paradigm's own settings (an instance of its Options)

    def set_iterations(self, iterations: int) -> None:
        """The run's iterations per worker, known once the data is loaded
        (e.g. Sync-Switch's sample budget = workers x iterations x batch)."""
        self.iterations = iterations

    # worker side --------------------------------------------------------
    def gate(self, worker: int, view: ClusterView) -> Gate:
        """May `worker`, having completed `view.clocks[worker]` pushes, start
        now? With no bound on others: once its own pushes are applied."""
        return own_writes_gate(worker, view)

    def batch_size(self, worker: int, view: ClusterView) -> int:
        """Samples in this worker's next batch."""
        return self.config.batch_size

    def local_steps(self, worker: int, view: ClusterView) -> int:
        """Local steps of `worker`'s next push (under the worker loop LocalSteps)."""
        return 1

    def worker_loop(self) -> WorkerLoop:
        """What its workers do between a pull and a push (paradigms/steps.py)."""
        return GradientSteps()

    def update_rule(self) -> UpdateRule:
        """What its servers do with the summed pushes (paradigms/steps.py);
        a second level's global servers sum the groups' deltas whatever this says."""
        return ConfiguredRule()

    @classmethod
    def group_servers(cls, config) -> int:
        """Ranks of a second level of servers this paradigm runs on (one per
        group; mpips/runtime/job/levels.py runs them): none unless it says so."""
        return 0

    @property
    def round_setting(self) -> str:
        """The setting that sizes `round_samples` (named by errors)."""
        return "batch_size"

    def round_samples(self) -> int:
        """Samples of one round of every worker's batch (the unit in which a
        global budget counts rounds)."""
        return self.num_workers * self.config.batch_size

    def iterations_per_epoch(self, num_train: int) -> int:
        """Iterations of each worker per pass over the training set."""
        return iterations_per_epoch(num_train, self.num_workers, self.config.batch_size)

    def push(self, worker: int, view: ClusterView, *, batch_size: int,
             read_updates: int, read_path_length: float, distance: float = float("nan")) -> Push:
        """Scale of the gradient about to be pushed.

        `read_updates` / `read_path_length` are the server's update count and
        path length when the worker pulled the parameters it computed on;
        `distance` is ||w_now - w_read|| when `wants_exact_distance` is set.
        By default a push of b samples is 1/W of an update from W*b samples
        (linear scaling), so `lr` means the same under every paradigm: BSP's
        sum of W such pushes is the mean gradient, and ASP does not diverge
        where BSP would not (Sync-Switch's eta_ASP = eta_BSP / W).
        """
        return Push(scale=1.0 / self.num_workers)

    def extras(self, worker: int, clock: int) -> tuple[float, ...]:
        """Up to 6 values (view.EXTRAS) this worker publishes in its control row
        (EXTRA0..EXTRA5) with every tick, e.g. DSSP credits; every worker
        reads them back as `ClusterView.extras`."""
        return ()

    def compression(self, worker: int, view: ClusterView, *, epoch: int) -> tuple[float, float] | None:
        """(ratio, rho) of this worker's compressor for its pushes in `epoch`
        (1-based), e.g. GSSP's per-group GDTopK schedule; None keeps the
        compressor's own."""
        return None

    def measured(self, worker: int, *, clock: int, batch: int, compute: float,
                 transfer: float) -> dict[str, Any] | None:
        """The worker computed iteration `clock` (0-based) on `batch` samples in
        `compute` seconds (forward/backward plus emulated slowdown) and spent
        `transfer` seconds in its pull and push, just before its tick;
        returns an event to log (with "kind"), or None."""
        return None

    def state(self) -> dict[str, Any]:
        """What a checkpoint must keep to resume this paradigm."""
        return {}

    def load_state(self, state: dict[str, Any]) -> None:
        pass

    # server side --------------------------------------------------------
    def server_ready(self, view: ClusterView, consumed: np.ndarray) -> bool:
        """Should a server apply what has arrived now? `consumed[j]` is the
        number of worker j's pushes this server already applied."""
        return bool((view.clocks > consumed).any())

    def server_take(self, view: ClusterView, consumed: np.ndarray) -> Take | None:
        """Which waiting pushes the step that `server_ready` allowed applies,
        and which it drops; None (every paradigm but BSP with backup
        workers): all of them, none dropped."""
        return None

    def server_control(self, view: ClusterView) -> list[tuple[int, float, dict[str, Any]]]:
        """Server 0 asks this every loop: global control slots to set, as
        (slot, value, event-to-log) triples (e.g. Sync-Switch's mode flag)."""
        return []

    def server_step(self, lr: float, momentum: float, view: ClusterView) -> tuple[float, float]:
        """Learning rate and momentum of the next server step, from the
        configured (and scheduled) ones. Whole rounds (BSP) keep them; pushes
        applied one by one take the asynchrony-compensated pair
        (`compensated_step`) unless `async_momentum` is as-set."""
        if self.synchronous(view) or not self.compensates:
            return lr, momentum
        return compensated_step(lr, momentum, compensated_momentum(momentum, self.num_workers))

    @property
    def compensates(self) -> bool:
        return self.config.async_momentum == "compensated" and self.config.optimizer == "sgd"

    def synchronous(self, view: ClusterView) -> bool:
        """True while updates are applied as whole rounds (BSP semantics)."""
        return False
