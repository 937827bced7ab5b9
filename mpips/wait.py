"""Waiting without spinning: poll with exponential backoff, and never forever.

Every wait in mpips goes through `wait_until`: it sleeps from a few
microseconds up to about a millisecond between polls (so eight ranks on two
cores still progress), prints whom it waits for after `warn` seconds, and
raises `StallError` naming them after `timeout` seconds.
"""
from __future__ import annotations

import sys
import time
from typing import Callable

MIN_SLEEP = 2e-6
MAX_SLEEP = 1e-3


class StallError(RuntimeError):
    """A wait exceeded its timeout; the message names what it waited for."""


def wait_until(ready: Callable[[], bool], *, what: str, describe: Callable[[], str],
               warn: float, timeout: float, prefix: str = "mpips") -> float:
    """Poll `ready()` until it is true; return the seconds waited.

    `describe()` is only called when a message is due, so it may be costly
    (it should name the ranks waited for and their clocks).
    """
    start = time.perf_counter()
    if ready():
        return 0.0
    sleep = MIN_SLEEP
    warned_at = 0.0
    while True:
        time.sleep(sleep)
        sleep = min(sleep * 2, MAX_SLEEP)
        if ready():
            return time.perf_counter() - start
        waited = time.perf_counter() - start
        if waited > timeout:
            raise StallError(f"{what}: stalled {waited:.0f}s (stall_timeout); waiting for {describe()}")
        if waited > warn and waited - warned_at > warn:
            warned_at = waited
            print(f"{prefix}: {what}: waiting {waited:.0f}s for {describe()}", file=sys.stderr, flush=True)
