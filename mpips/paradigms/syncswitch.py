"""Sync-Switch: BSP and ASP inside one run (Li et al., ICDCS 2021).

The mode is a pair in the control window: MODE (BSP or ASP) and MODE_CLOCK = K,
read as "pushes of clock (iteration index) >= K are in MODE, pushes before K in
the other mode". Decisions are keyed by clock, never by when someone happened
to read the flag, so every server groups the same pushes the same way and every
push belongs to exactly one phase. Server 0 alone decides (`server_control`);
workers and the other servers learn the pair at their next poll.

Choosing K. A switch must not reclassify a push that someone has already
handled under the old rule:
- BSP -> ASP: in BSP no worker can start round r+1 before server 0 has applied
  round r, and server 0 decides *before* applying in its loop, so no push of a
  clock above max(clocks) can exist yet: K = max(clocks) + 1 is safe.
- ASP -> BSP: ASP workers pass their gate freely, so a worker may start a new
  iteration between server 0's read and its write. Two phases: server 0 first
  writes MODE_CLOCK = -1 ("being decided": gates behave as BSP, servers hold
  their applies), then, at its next poll, reads the clocks again and writes
  K = max(clocks) + 1: every iteration that passed an ASP gate did so before the
  first write, so its clock is below K.
MODE_CLOCK = -1 is written first and K last, so a reader never pairs a new MODE
with an old K. A new decision waits until the previous one is settled (every
server has applied a push of clock >= K), so every server has seen every pair.

At a boundary K:
- BSP before K, ASP from K: the servers apply rounds < K whole; a worker at
  clock >= K passes once every push < K is applied (so no ASP push can land in a
  server's gradient window while it still holds a partial BSP round), then
  freely. A worker mid-iteration when the flag flips finishes an iteration of
  the old phase (its clock < K); push scales do not change (below).
- ASP before K, BSP from K: pushes < K are applied as they arrive; the BSP gate
  at clock K lets the laggards catch up (every push < K applied first), and the
  servers then apply only whole rounds K, K+1, ... (rounds relative to K).
A server holding pushes of a partial round when the mode flips to ASP keeps
them as the round they belong to: they are applied when that round is whole.

Hyper-parameters. The runtime's push scale is 1/W under every paradigm (see
`Paradigm.push`): a BSP round is the mean of W pushes of b samples stepped with
lr eta, and an ASP push is 1/W of such a step with the same lr, i.e. exactly
eta_ASP = eta_BSP / W per push of b samples. So the servers keep lr = eta in
both modes and this module does not scale again (that would be eta / W^2).
Momentum is cut to m/W for the first ASP update after a switch to ASP and ramps
linearly over `momentum_ramp` ASP pushes (counted as pushes applied by every
server since K, so every shard ramps alike) to ASP's momentum: with
`async_momentum` compensated (the default) the compensated one of every
asynchronous paradigm (`Paradigm.server_step`: asynchrony already acts as
momentum of about 1 - 1/W), at an lr that keeps BSP's long-run step
lr/(1-m) all along; with as-set, back to m at the same lr, as the authors
did. BSP steps use m and lr.

Policies (`server_control`, server 0):
- offline (`online_policy=none`): one switch, BSP -> ASP, when the BSP rounds
  reach ceil(f x iterations), i.e. the samples processed reach f of the budget
  W x iterations x b (to within one round).
- online (`greedy`/`conservative`): during BSP, a worker whose last iteration
  time exceeds straggler_factor x the median for straggler_rounds (greedy) or
  conservative_window (conservative) consecutive iterations triggers ASP; when
  it has been back under the factor for straggler_rounds iterations, BSP
  resumes. BSP rounds still total ceil(f x iterations): once spent, ASP stays.

Log: every switch is an event `switch` of server 0 (time of the write of K):
`to` (asp|bsp), `clock` (K), `reason`, `samples` (W x b x K, the samples
processed when the new mode takes effect), `samples_pushed` (at the decision),
`bsp_samples` (of all BSP phases up to K), `budget`, `bsp_target` (f x budget),
`lr` and `momentum` in effect after it (`momentum_ramp` for ASP; `decided`, the
time of the first phase, for BSP). Each server's `applies` rows carry the lr
and momentum of every step.

A caveat: the control table is read with one Get; the causal chain from a
decision to the first push it governs runs through a whole worker iteration,
so a snapshot that shows such a push shows the decision. `round_ready` keeps
the servers live even if a snapshot ever broke that order.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..settings import MAX_COUNT, setting
from .base import Options, Paradigm, compensated_momentum, compensated_step
from .gates import bounded_gate, own_writes_gate
from .view import MODE_ASP, MODE_BSP, SLOT_MODE, SLOT_MODE_CLOCK, ClusterView

DECIDING = -1   # MODE_CLOCK while an ASP -> BSP switch is being decided
MODE_NAMES = {MODE_BSP: "bsp", MODE_ASP: "asp"}


def round_ready(view: ClusterView, consumed: np.ndarray) -> bool:
    """The lowest round this server still owes is whole: every worker that
    will push it has pushed it (done workers past their last push excepted)."""
    owed = ~(view.done & (view.clocks <= consumed))
    if not owed.any():
        return False
    lowest = consumed[owed].min()
    return bool((view.clocks[owed] > lowest).all())


def momentum_after_switch(momentum: float, workers: int, pushes: int, ramp: int,
                          target: float | None = None) -> float:
    """m/W right after a switch to ASP, then linearly over `ramp` pushes to
    `target` (default m; the paradigm passes ASP's compensated momentum)."""
    target = momentum if target is None else target
    progress = 1.0 if ramp == 0 else min(1.0, pushes / ramp)
    cut = momentum / workers
    return cut + (target - cut) * progress


class StragglerDetector:
    """Consecutive slow and normal iterations per worker, from the iteration
    times in the control table: slow = above `factor` x the median."""

    def __init__(self, factor: float, workers: int):
        self.factor = factor
        self.seen = np.zeros(workers, dtype=np.int64)
        self.slow = np.zeros(workers, dtype=np.int64)
        self.normal = np.zeros(workers, dtype=np.int64)

    def observe(self, view: ClusterView) -> None:
        """Count each worker's newest iteration once (a worker that pushed twice
        between two looks counts once: its older time is gone)."""
        times = view.iter_times
        known = np.isfinite(times)
        new = (view.clocks > self.seen) & known
        self.seen = np.maximum(self.seen, view.clocks)
        if not new.any() or known.sum() < 2:
            return
        slow = times > self.factor * float(np.median(times[known]))
        self.slow = np.where(new, np.where(slow, self.slow + 1, 0), self.slow)
        self.normal = np.where(new, np.where(slow, 0, self.normal + 1), self.normal)

    def slow_for(self, iterations: int) -> list[int]:
        return [int(j) for j in np.flatnonzero(self.slow >= iterations)]

    def cleared(self, workers, iterations: int) -> bool:
        return all(self.normal[j] >= iterations for j in workers)


ONLINE_POLICIES = ("none", "greedy", "conservative")


@dataclass(frozen=True)
class SyncSwitchOptions(Options):
    switch_at: float = setting(0.1, "fraction of the sample budget done in BSP", low=0.0, high=1.0)
    online_policy: str = setting("none", "reaction to transient stragglers", choices=ONLINE_POLICIES)
    straggler_factor: float = setting(1.5, "slower than the median by this factor is a straggler",
                                      low=0.0, low_open=True, high=1e4)
    straggler_rounds: int = setting(3, "consecutive slow rounds before acting", low=1, high=MAX_COUNT)
    conservative_window: int = setting(10, "online-policy conservative: rounds the slowdown must last",
                                       low=1, high=MAX_COUNT)
    momentum_ramp: int = setting(100, "updates over which momentum ramps back after m/W", low=0,
                                 high=MAX_COUNT)


class SyncSwitch(Paradigm):
    name = "syncswitch"
    Options = SyncSwitchOptions

    def __init__(self, config, num_workers):
        super().__init__(config, num_workers)
        options = self.options
        self.f = options.switch_at
        self.policy = options.online_policy
        self.need_slow = (options.straggler_rounds if self.policy != "conservative"
                          else max(options.straggler_rounds, options.conservative_window))
        self.need_normal = options.straggler_rounds
        self.ramp = options.momentum_ramp
        # server 0, the decider: the phases so far
        self.detector = StragglerDetector(options.straggler_factor, num_workers)
        self.mode = MODE_BSP          # of the current phase
        self.phase_start = 0          # its K
        self.bsp_rounds = 0           # rounds of the finished BSP phases
        self.switches = 0
        self.cause: list[int] = []    # stragglers that started the current ASP phase
        self.final = False            # the BSP budget is spent: ASP to the end
        self.deciding: dict | None = None
        # every server: where the latest ASP phase began (momentum ramp)
        self.asp_from = 0

    # checkpoints: the control table (MODE, MODE_CLOCK) is saved with it; this
    # is server 0's account of the phases, without which a resumed job would
    # decide the offline switch again.
    _STATE = ("mode", "phase_start", "bsp_rounds", "switches", "cause", "final", "deciding", "asp_from")

    def state(self):
        d = self.detector
        return {**{k: getattr(self, k) for k in self._STATE},
                "detector": {"seen": d.seen.copy(), "slow": d.slow.copy(), "normal": d.normal.copy()}}

    def load_state(self, state):
        for k in self._STATE:
            setattr(self, k, state[k])
        for k, v in state["detector"].items():
            getattr(self.detector, k)[:] = v

    # budget -----------------------------------------------------------------
    @property
    def bsp_target(self) -> int:
        """BSP rounds in the whole run: f of the sample budget, whole rounds up."""
        return math.ceil(self.f * self.iterations - 1e-9)

    def samples(self, rounds: int) -> int:
        return rounds * self.num_workers * self.config.batch_size

    # worker side ----------------------------------------------------------------
    def gate(self, worker, view):
        c, k = view.clock(worker), view.mode_clock
        if k == DECIDING:
            return bounded_gate(worker, view, 0)       # the safe side until K is known
        if view.mode == MODE_BSP:
            return own_writes_gate(worker, view) if c < k else bounded_gate(worker, view, 0)
        if c < k:
            return bounded_gate(worker, view, 0)       # BSP rounds before the switch
        # every push < K applied (and, read-your-writes, all of its own), then free
        return bounded_gate(worker, view, c - k)

    # every server ---------------------------------------------------------------
    def _observe(self, view: ClusterView) -> None:
        if view.mode == MODE_ASP and view.mode_clock >= 0:
            self.asp_from = view.mode_clock

    def server_ready(self, view, consumed):
        self._observe(view)
        k = view.mode_clock
        if k == DECIDING:
            return False          # server 0 writes K at its next poll
        owed_before = consumed < np.where(view.done, np.minimum(view.clocks, k), k)
        if view.mode == MODE_ASP:
            return round_ready(view, consumed) if owed_before.any() else bool((view.clocks > consumed).any())
        if (consumed < np.minimum(view.clocks, k)).any():
            return True           # ASP pushes before K, as they arrive
        return False if owed_before.any() else round_ready(view, consumed)

    def _step_mode(self, view: ClusterView) -> int:
        """Mode of the pushes the next step applies: a step covers pushes >= K
        exactly when some clock is past K (the gates keep the phases apart)."""
        after = bool((view.clocks > view.mode_clock).any())
        return view.mode if after else 1 - view.mode

    def server_step(self, lr, momentum, view):
        self._observe(view)
        if view.mode_clock == DECIDING or self._step_mode(view) == MODE_BSP:
            return lr, momentum
        start = view.mode_clock if view.mode == MODE_ASP else self.asp_from
        pushes = int(np.maximum(view.applied - start, 0).sum())
        m = momentum_after_switch(momentum, self.num_workers, pushes, self.ramp,
                                  self._asp_momentum(momentum))
        # compensated: the same long-run step lr/(1-m) as BSP's all along the ramp
        return compensated_step(lr, momentum, m) if self.compensates else (lr, m)

    def _asp_momentum(self, momentum: float) -> float:
        """Where the ramp ends: ASP's compensated momentum (Paradigm.server_step), or m."""
        return compensated_momentum(momentum, self.num_workers) if self.compensates else momentum

    def synchronous(self, view):
        k = view.mode_clock
        return k != DECIDING and (view.mode == MODE_BSP) == (view.c_min() >= k)

    # server 0: the decisions ------------------------------------------------------
    def server_control(self, view):
        if self.deciding is not None:
            return self._resolve_bsp(view, self.deciding)
        self.detector.observe(view)
        if not self._settled(view):
            return []
        k = int(view.clocks.max()) + 1
        if k >= self.iterations:
            return []             # no round left to switch
        if self.mode == MODE_BSP:
            end = self.phase_start + self.bsp_target - self.bsp_rounds
            if k >= end:
                self.final = True
                return self._to_asp(view, k, f"BSP samples reached {self.f:g} of the budget")
            slow = self.detector.slow_for(self.need_slow) if self.policy != "none" else []
            if slow:
                self.cause = slow
                return self._to_asp(view, k, f"straggler {self._describe(view, slow)} "
                                             f"({self.policy} policy)")
            return []
        if (self.policy != "none" and not self.final and self.bsp_rounds < self.bsp_target
                and self.detector.cleared(self.cause, self.need_normal)):
            self.deciding = {"reason": f"straggler {self.cause} cleared for "
                                       f"{self.need_normal} iterations", "decided": view.now}
            return [(SLOT_MODE_CLOCK, DECIDING, None), (SLOT_MODE, MODE_BSP, None)]
        return []

    def _settled(self, view: ClusterView) -> bool:
        """Every server has applied a push of clock >= the last K (so has seen
        the last decision), or the run is over."""
        return self.switches == 0 or bool((view.applied > self.phase_start).any() or view.done.all())

    def _describe(self, view: ClusterView, workers: list[int]) -> str:
        known = view.iter_times[np.isfinite(view.iter_times)]
        median = float(np.median(known)) if known.size else math.nan
        return ", ".join(f"worker {j} ({view.iter_times[j]:.4f}s vs median {median:.4f}s "
                         f"for {int(self.detector.slow[j])} iterations)" for j in workers)

    def _event(self, view: ClusterView, to: int, k: int, reason: str, momentum: float) -> dict:
        budget = self.samples(self.iterations)
        return {"kind": "switch", "to": MODE_NAMES[to], "clock": k, "reason": reason,
                "samples": self.samples(k), "samples_pushed": int(view.clocks.sum()) * self.config.batch_size,
                "bsp_samples": self.samples(self.bsp_rounds), "budget": budget,
                "bsp_target": self.f * budget, "momentum": momentum,
                "lr": (compensated_step(self.config.lr, self.config.momentum, momentum)[0]
                       if to == MODE_ASP and self.compensates else self.config.lr)}

    def _to_asp(self, view: ClusterView, k: int, reason: str):
        self.bsp_rounds += k - self.phase_start
        self.mode, self.phase_start = MODE_ASP, k
        self.switches += 1
        m = self.config.momentum
        event = self._event(view, MODE_ASP, k, reason,
                            momentum_after_switch(m, self.num_workers, 0, self.ramp,
                                                  self._asp_momentum(m)))
        event["momentum_ramp"] = self.ramp
        return [(SLOT_MODE_CLOCK, DECIDING, None), (SLOT_MODE, MODE_ASP, None), (SLOT_MODE_CLOCK, k, event)]

    def _resolve_bsp(self, view: ClusterView, deciding: dict):
        """Second half of ASP -> BSP: K from clocks read after MODE_CLOCK = -1."""
        k = int(view.clocks.max()) + 1
        self.mode, self.phase_start = MODE_BSP, k
        self.switches += 1
        event = self._event(view, MODE_BSP, k, deciding["reason"], self.config.momentum)
        event["decided"] = deciding["decided"]
        self.deciding = None
        self.cause = []
        return [(SLOT_MODE_CLOCK, k, event)]
