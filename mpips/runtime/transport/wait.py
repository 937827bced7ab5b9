"""Time as the roles see it, and waiting without spinning.

The roles never call `time` themselves but a `Clock`: its `time()`,
`perf_counter()`, `sleep()` (an emulated device's time), `wait_until()` for
every wait, counted from its `origin`. Under MPI that is the wall clock and
the polling below; in `mpips simulate` the same calls advance virtual time
(scheduler.py), so the roles' code is the same for both transports.

Every wait in mpips goes through `wait_until`: it sleeps between polls, each
sleep a quarter of the time waited so far (from a few microseconds up to a
millisecond, so eight ranks on two cores still progress), prints whom it
waits for after `warn` seconds, and raises `StallError` naming them after
`timeout` seconds. A waiter that can tell when the awaited thing is due
(a server: its workers' next pushes, from their push intervals) sleeps
until then and backs off from there, so it notices it soon after it lands
without polling all along.
"""
from __future__ import annotations

import ctypes
import sys
import time
from typing import Callable, Protocol

import numpy as np

MIN_SLEEP = 2e-6
MAX_SLEEP = 1e-3
# Each sleep is at most this fraction of the time waited so far (or since the
# awaited thing was due): it is noticed at most that fraction late, at the
# cost of a few more polls (benchmarks/overhead.py).
LATE_FRACTION = 0.25
OVERDUE_FRACTION = 0.1   # the same once it is due: it should land any moment
# A wait told whether anything it reads `changed` checks `ready()` only then,
# and at least this often (a server's duties that depend on the time).
HEARTBEAT = 1e-3


def precise_sleeps() -> None:
    """Let this process's short sleeps be short: Linux stretches every sleep
    by the thread's timer slack (50 us by default), which would make every
    poll's first sleeps ~60 us whatever was asked. Elsewhere: nothing."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(29, 1000, 0, 0, 0)   # PR_SET_TIMERSLACK, 1 us
        except (OSError, AttributeError):
            pass


def next_sleep(waited: float, expected: np.ndarray | float | None = None) -> float:
    """How long to sleep before the next poll, `waited` seconds into a wait;
    `expected` as `due()` returns it."""
    if isinstance(expected, float):   # one thing awaited (a gate): never later than without, finer once due
        sleep = min(expected if expected > 0 else -expected * OVERDUE_FRACTION, waited * LATE_FRACTION)
    elif expected is None or not len(expected):
        sleep = waited * LATE_FRACTION
    else:   # until the soonest is due, or backing off from when it was due
        sleep = float(np.min(np.where(expected > 0, expected, -expected * OVERDUE_FRACTION)))
    return min(max(sleep, MIN_SLEEP), MAX_SLEEP)


class StallError(RuntimeError):
    """A wait exceeded its timeout; the message names what it waited for."""


def wait_until(ready: Callable[[], bool], *, what: str, describe: Callable[[], str],
               warn: float, timeout: float, prefix: str = "mpips",
               due: Callable[[], np.ndarray | float | None] | None = None,
               changed: Callable[[], bool] | None = None) -> float:
    """Poll `ready()` until it is true; return the seconds waited.

    `describe()` is only called when a message is due, so it may be costly
    (it should name the ranks waited for and their clocks). `due()`, after a
    poll that was not ready: in how many seconds each thing awaited is
    expected (negative: overdue by that much; None or empty: no idea).
    `changed()`: whether what `ready()` reads may have changed since it last
    read it (one cell of a control table: mpi.ControlWindow.changed); a poll
    that finds nothing changed skips `ready()` (its reads, its view, its
    paradigm's decisions), unless HEARTBEAT passed since it last ran.
    """
    start = time.perf_counter()
    if ready():
        return 0.0
    warned_at = 0.0
    waited = checked = 0.0
    expected = _due_at(due, 0.0)   # when each awaited thing is due, in seconds since the start
    while True:
        time.sleep(next_sleep(waited, None if expected is None else expected - waited))
        if changed is None or changed() or time.perf_counter() - start - checked > HEARTBEAT:
            if ready():
                return time.perf_counter() - start
            checked = time.perf_counter() - start
            expected = _due_at(due, checked)
        waited = time.perf_counter() - start
        if waited > timeout:
            raise StallError(f"{what}: stalled {waited:.0f}s (stall_timeout); waiting for {describe()}")
        if waited > warn and waited - warned_at > warn:
            warned_at = waited
            print(f"{prefix}: {what}: waiting {waited:.0f}s for {describe()}", file=sys.stderr, flush=True)


def _due_at(due: Callable[[], np.ndarray | float | None] | None, now: float):
    """`due()`, asked right after a check at `now`, as times since the wait's start."""
    expected = due() if due is not None else None
    if expected is None or isinstance(expected, float):
        return None if expected is None else now + expected
    return now + np.asarray(expected)


class Clock(Protocol):
    origin: float   # the run's time zero (its start barrier), in time()'s units

    def time(self) -> float: ...

    def perf_counter(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...

    def wait_until(self, ready: Callable[[], bool], *, what: str, describe: Callable[[], str],
                   warn: float, timeout: float,
                   due: Callable[[], np.ndarray | float | None] | None = None,
                   changed: Callable[[], bool] | None = None) -> float: ...


def sleep(seconds: float) -> None:
    """time.sleep, in pieces of at most a day: an emulated device time may
    exceed the platform's time_t (LB-BSP's largest batch at p = 3), which
    time.sleep refuses with OverflowError."""
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        time.sleep(min(left, 86400.0))


class WallClock:
    """The real clock: `time.time`, `time.perf_counter`, `sleep` above, and
    waits that poll with backoff."""

    perf_counter = staticmethod(time.perf_counter)
    sleep = staticmethod(sleep)
    wait_until = staticmethod(wait_until)
    time = staticmethod(time.time)   # last: in this class's body it is `time` from here on
    origin = 0.0


class SetupTimeout(RuntimeError):
    """A rank did not arrive at an exchange; `str()` is one line naming it
    (`missing`: the ranks, as rank 0 saw them; empty on the other ranks).
    `status`: the job's exit status (2 in set-up: nothing ran; 1 at the end)."""

    def __init__(self, message: str, missing: list[int] | None = None, status: int = 2):
        super().__init__(message)
        self.missing = missing or []
        self.status = status
