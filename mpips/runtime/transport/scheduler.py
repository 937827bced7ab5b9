"""A deterministic discrete-event scheduler in virtual time, for `mpips simulate`.

Every role of a job is a task (a greenlet) running the same blocking code
as under MPI; one task runs at a time, and it runs until it sleeps, waits or
ends, then resumes the next task itself (one greenlet switch per
resumption, not two through a central loop; none when its own wake-up is
the next event). Sleeps advance virtual time (a heap of wake-up times, ties in the order
the sleeps were asked for); a wait whose condition is false parks the task
until the shared state changes (the in-process transport calls `changed()` on
every write) and every task due at the current instant has run, then checks
again, the tasks woken together in the order their waits began. A wait is
woken only by writes to what its last check read (a GSSP group's table, not
another group's; the cells it read, where it read only some) or, where the
check says so (`depends_on`), to the parts of it that can make it pass (a
worker's gate: the applied count of a worker it waits for), else every
write would wake every parked task, mostly to fail again
(benchmarks/results/simulator.md). A check skipped would have failed: a task
resumes at the same virtual instant as if it were woken by every write. A
woken wait's check runs in the scheduler's loop, at the task's turn, and the
task itself is resumed only once it passes (a check that fails costs no
task switch).
Nothing depends on the wall clock or on thread timing, so a run is
bit-reproducible, and a wait that can never end is found at once: no task
can run, none sleeps, and the stall names what each waiting task waits for.

Why greenlets: the roles are ordinary blocking code (mpips/runtime/roles/worker.py polls
its gate in a loop, deep in calls), so a scheduler must suspend a task in
the middle of a call stack. Generators (or SimPy, built on them) would make
every function on that path a generator and the roles different from the MPI
ones; threads passing a baton cost tens of microseconds per switch in the
GIL's hand-off. A greenlet switch costs under a microsecond, a whole event
(a sleep, the timer heap, the switches out and back) a few, and three times
that once the tasks' own work between events has evicted it from the caches
(benchmarks/studies/scheduler_events.py).
"""
from __future__ import annotations

import functools
from collections import deque
from heapq import heappop, heappush
from typing import Callable

import greenlet
from torch import is_grad_enabled, set_grad_enabled

from .wait import StallError


class TaskFailed(RuntimeError):
    """A task raised: the whole simulation ends, naming the task."""


class Task:
    def __init__(self, name: str, body: Callable[[], object], scheduler: "Scheduler"):
        self.name = name
        self.result = None
        self.waiting_for: tuple[str, Callable[[], str]] | None = None
        # torch's grad mode is per thread, and every task runs in this one: a
        # task that sleeps inside `torch.no_grad()` (an evaluation's pull)
        # must not leave it off for the next
        self.grad_enabled = True
        self.reads: dict[int, int] = {}     # source -> times its last readiness check read all of it
        self.depends: dict[int, list] = {}  # source -> the parts of it that check read, or depends on
        self.number = 0                     # its current wait's place in line
        self.parked = 0                     # the token of its current park, 0 when not parked
        # its current wait: the readiness check the scheduler runs when woken,
        # when the wait began, and after how long it is a stall
        self.check: Callable[[], bool] | None = None
        self.since = 0.0
        self.timeout = 0.0

        def run():
            self.result = body()

        self.greenlet = greenlet.greenlet(run, parent=scheduler._main)

    def waiting(self, *, stalled: float | None = None) -> str:
        """What this task waits for, for messages (`stalled`: for how many
        seconds of virtual time, past its timeout)."""
        what, describe = self.waiting_for or ("?", lambda: "?")
        if stalled is None:
            return f"{what}: waiting for {describe()}"
        return f"{what}: stalled {stalled:.0f}s of virtual time (stall_timeout); waiting for {describe()}"


class Scheduler:
    """Run tasks in virtual time; the roles' `Clock` of it (mpips/runtime/transport/wait.py)."""

    def __init__(self):
        self.now = 0.0
        self._main = greenlet.getcurrent()
        self._runnable: deque[Task] = deque()
        self._timers: list[tuple[float, int, Task]] = []
        self._parked: dict[Task, int] = {}     # parked task -> its wait's number
        # the tasks parked on changes, and their park tokens: to all of a
        # source, to a part of one (source -> part -> tasks), to anything
        self._whole: dict[int, dict[Task, int]] = {}
        self._parts: dict[int, dict[int, dict[Task, int]]] = {}
        self._any: dict[Task, int] = {}
        self._woken: dict[Task, int] = {}      # woken tasks -> their wait's number
        self._seq = 0         # orders sleeps of the same instant, waits, parks
        self.current: Task | None = None
        self._failed: TaskFailed | None = None   # a check that raised while a task chose the next
        self.switches = 0     # task resumptions: the simulator's own work (benchmarks/simulator.py)
        # the `Clock` of simulated roles: time is the scheduler's, read
        # without a Python call (a worker reads the clock about 17 times an iteration)
        self.time = self.perf_counter = functools.partial(getattr, self, "now")
        self.origin = 0.0

    def spawn(self, name: str, body: Callable[[], object]) -> Task:
        task = Task(name, body, self)
        self._runnable.append(task)
        return task

    def changed(self, source: int, parts=(), *, whole: bool = True) -> None:
        """`source` (a table, a parameter store) changed, at `parts` of it:
        the waits that depend on it check again (once every task due now has
        run, so one check sees all of this instant's writes). `whole=False`:
        only the waits that read those parts, not those that read all of it."""
        woken = self._woken
        if whole and source in self._whole:
            _wake(self._whole.pop(source), woken)
        if self._any:
            _wake(self._any, woken)
            self._any = {}
        by_part = self._parts.get(source)
        if by_part:
            for p in parts:
                tasks = by_part.pop(p, None)
                if tasks:
                    _wake(tasks, woken)

    def read(self, source: int, parts=None) -> None:
        """The running task read `source`, or only `parts` of it."""
        task = self.current
        if task is not None:
            if parts is None:
                reads = task.reads
                reads[source] = reads.get(source, 0) + 1
            else:
                depends = task.depends
                if source in depends:
                    depends[source].extend(parts)
                else:
                    depends[source] = list(parts)

    def depends_on(self, source: int, parts: list) -> None:
        """The running check's answer, from its one read of all of `source`,
        can change only where `parts` of it change (the in-process transport
        names the parts it writes)."""
        task = self.current
        if task is not None and task.reads.get(source) == 1:
            task.reads[source] = 0
            task.depends.setdefault(source, []).extend(parts)

    def run(self) -> None:
        """Run every task to its end. Raises TaskFailed if one raises (the
        others are dropped), StallError if the tasks left can only wait.

        A task that sleeps or waits resumes the next task itself (`_yield`):
        one greenlet switch per resumption, not two through this loop. The
        loop resumes the first task, and the next whenever one ends, raises
        or finds none that can run."""
        grad_mode = is_grad_enabled()
        try:
            while True:
                if self._failed is not None:
                    raise self._failed
                task = self._next()
                if task is None:
                    self.current = None
                    break
                self._resume(task, is_grad_enabled())
                try:
                    task.greenlet.switch()
                except BaseException as e:   # noqa: BLE001 - one task failing ends the simulation
                    failed = self.current or task   # (the task running when it raised)
                    raise TaskFailed(f"{failed.name} at t={self.now:.6f}s: {type(e).__name__}: {e}") from e
                self.current = None
        finally:
            set_grad_enabled(grad_mode)
        if self._parked:
            raise StallError("deadlock in virtual time: " + "; ".join(
                t.waiting() for t in sorted(self._parked, key=self._parked.__getitem__)))

    def _next(self) -> Task | None:
        """The next task to resume, its wait's check passed, advancing
        virtual time to it; None when no task can run."""
        runnable, woken, timers, parked = self._runnable, self._woken, self._timers, self._parked
        while True:
            while runnable:
                task = runnable.popleft()
                if task.check is None or self._check(task):
                    return task
            if woken:
                for task in sorted(woken, key=woken.__getitem__) if len(woken) > 1 else woken:
                    task.parked = 0
                    del parked[task]
                    runnable.append(task)
                woken.clear()
            elif timers:
                self.now = now = timers[0][0]
                while timers and timers[0][0] == now:
                    runnable.append(heappop(timers)[2])
            else:
                return None

    def _resume(self, task: Task, grad_mode: bool) -> None:
        """Make `task` the running one, in its own grad mode (`Task.grad_enabled`;
        the mode now is `grad_mode`)."""
        self.current = task
        self.switches += 1
        if task.grad_enabled is not grad_mode:
            set_grad_enabled(task.grad_enabled)

    def _yield(self) -> None:
        """The running task sleeps or waits: resume the next task directly
        (itself, when its own sleep is the next event: no switch), or, when
        none can run or a check failed, hand over to `run`."""
        me = self.current
        assert me is not None   # (called from inside a task)
        me.grad_enabled = is_grad_enabled()
        try:
            task = self._next()
        except TaskFailed as e:   # another task's check: reported by `run`, not raised in this task's code
            self._failed, task = e, None
        if task is None or not task.greenlet:
            # a task not yet started starts from `run`: a greenlet begins at
            # the recursion depth of whoever starts it, and one task starting
            # the next would reach Python's limit in a few hundred
            if task is not None:
                self._runnable.appendleft(task)
            self.current = None
            self._main.switch()
            return
        self._resume(task, me.grad_enabled)
        if task is not me:
            task.greenlet.switch()

    # called from inside a task ------------------------------------------------------
    def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            return
        me = self.current
        assert me is not None   # (called from inside a task)
        self._seq += 1
        heappush(self._timers, (self.now + seconds, self._seq, me))
        self._yield()

    def wait_until(self, ready, *, what: str, describe, warn: float, timeout: float, due=None,
                   changed=None) -> float:
        """wait.wait_until in virtual time: check `ready()` whenever the shared
        state changed; `warn`, `due` and `changed` do not apply (nothing polls). Once
        parked, the check runs in the scheduler's loop, at the task's turn,
        and the task is resumed only when it passes (a check is a poll: it
        neither sleeps nor waits)."""
        task = self.current
        assert task is not None   # (called from inside a task)
        task.reads.clear()
        task.depends.clear()
        if ready():
            return 0.0
        task.waiting_for = (what, describe)
        task.check, task.since, task.timeout = ready, self.now, timeout
        self._seq += 1
        task.number = self._seq
        self._park(task)
        self._yield()
        return self.now - task.since

    def _check(self, task: Task) -> bool:
        """A woken task's readiness check, run without switching to the task:
        True (the wait is over) or False (parked again). A check that raises,
        or a wait past its timeout, fails the task as if it raised itself."""
        self.current = task   # (what the check reads, it reads for this task)
        task.reads.clear()
        task.depends.clear()
        check = task.check
        assert check is not None   # (a parked task's)
        try:
            if check():
                task.check = task.waiting_for = None
                return True
            if self.now - task.since > task.timeout:
                raise StallError(task.waiting(stalled=self.now - task.since))
        except BaseException as e:   # noqa: BLE001 - one task failing ends the simulation
            raise TaskFailed(f"{task.name} at t={self.now:.6f}s: {type(e).__name__}: {e}") from e
        self._park(task)
        return False

    def _park(self, task: Task) -> None:
        self._seq += 1
        token = task.parked = self._seq
        self._parked[task] = task.number
        reads, parked_on = task.reads, 0
        for source, times in reads.items():
            if times:
                self._whole.setdefault(source, {})[task] = token
                parked_on += 1
        for source, parts in task.depends.items():
            if parts and not reads.get(source):   # (a read of all of it covers its parts)
                by_part = self._parts.setdefault(source, {})
                for p in parts:
                    if p in by_part:
                        by_part[p][task] = token
                    else:
                        by_part[p] = {task: token}
                parked_on += 1
        if not parked_on:   # a check that read nothing through the transport waits for any change
            self._any[task] = token


def _wake(tasks: dict[Task, int], woken: dict[Task, int]) -> None:
    for task, token in tasks.items():
        if task.parked == token:   # else woken since, or parked again
            woken[task] = task.number
