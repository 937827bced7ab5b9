"""Time as the roles see it: the wall clock of an MPI job, or the virtual
clock of `mpips simulate` (mpips/runtime/scheduler.py).

The roles never call `time` themselves: they read `clock.time()` and
`clock.perf_counter()`, `clock.sleep()` through an emulated device's time, and
`clock.wait_until()` for every wait, and count from `clock.origin`. Under MPI that is the wall clock and
polling with backoff (mpips/runtime/wait.py); in the simulator the same calls advance
virtual time, so the roles' code is the same for both transports.
"""
from __future__ import annotations

import time as _time
from typing import Callable, Protocol

import numpy as np

from .wait import wait_until


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

    time = staticmethod(_time.time)
    perf_counter = staticmethod(_time.perf_counter)
    sleep = staticmethod(_time.sleep)
    wait_until = staticmethod(wait_until)
    origin = 0.0
