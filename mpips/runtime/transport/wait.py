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


def precise_sleeps() -> None:
    """Let this process's short sleeps be short: Linux stretches every sleep
    by the thread's timer slack (50 us by default), which would make every
    poll's first sleeps ~60 us whatever was asked. Elsewhere: nothing."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(29, 1000, 0, 0, 0)   # PR_SET_TIMERSLACK, 1 us
        except (OSError, AttributeError):
            pass


def next_sleep(waited: float, expected: np.ndarray | None = None) -> float:
    """How long to sleep before the next poll, `waited` seconds into a wait;
    `expected` as `due()` returns it."""
    if expected is None or not len(expected):
        sleep = waited * LATE_FRACTION
    else:   # until the soonest is due, or backing off from when it was due
        sleep = float(np.min(np.where(expected > 0, expected, -expected * OVERDUE_FRACTION)))
    return min(max(sleep, MIN_SLEEP), MAX_SLEEP)


class StallError(RuntimeError):
    """A wait exceeded its timeout; the message names what it waited for."""


def wait_until(ready: Callable[[], bool], *, what: str, describe: Callable[[], str],
               warn: float, timeout: float, prefix: str = "mpips",
               due: Callable[[], np.ndarray | None] | None = None) -> float:
    """Poll `ready()` until it is true; return the seconds waited.

    `describe()` is only called when a message is due, so it may be costly
    (it should name the ranks waited for and their clocks). `due()`, after a
    poll that was not ready: in how many seconds each thing awaited is
    expected (negative: overdue by that much; None or empty: no idea).
    """
    start = time.perf_counter()
    if ready():
        return 0.0
    warned_at = 0.0
    waited = 0.0
    while True:
        time.sleep(next_sleep(waited, due() if due is not None else None))
        if ready():
            return time.perf_counter() - start
        waited = time.perf_counter() - start
        if waited > timeout:
            raise StallError(f"{what}: stalled {waited:.0f}s (stall_timeout); waiting for {describe()}")
        if waited > warn and waited - warned_at > warn:
            warned_at = waited
            print(f"{prefix}: {what}: waiting {waited:.0f}s for {describe()}", file=sys.stderr, flush=True)


class Clock(Protocol):
    origin: float   # the run's time zero (its start barrier), in time()'s units

    def time(self) -> float: ...

    def perf_counter(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...

    def wait_until(self, ready: Callable[[], bool], *, what: str, describe: Callable[[], str],
                   warn: float, timeout: float,
                   due: Callable[[], np.ndarray | None] | None = None) -> float: ...


class WallClock:
    """The real clock: `time.time`, `time.perf_counter`, `time.sleep`, and
    waits that poll with backoff."""

    perf_counter = staticmethod(time.perf_counter)
    sleep = staticmethod(time.sleep)
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
