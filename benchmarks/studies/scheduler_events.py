"""What one event of the simulator's scheduler costs, alone and when the
tasks touch memory between events as a simulated worker's forward/backward does.

    python benchmarks/scheduler_events.py

256 tasks on mpips.runtime.transport.scheduler.Scheduler, each looping EVENTS times:
touch its own buffer (one read and one write of every byte, `buf += 1`),
then sleep a seeded random time, so the tasks run in an order no cache
predicts. The touches are timed from inside; an event's cost is the rest of
the run (the sleep, the timer heap, the switch to the loop and back to the
next task) over the number of events. Buffer sizes: none, and sizes around a
digits-MLP worker's own memory (its parameters and gradients alone: 2 x 67
KiB; every simulated worker has its own, as every MPI rank). Sizes
interleaved, REPEATS times, median reported. It tells the scheduler's own
cost apart from the cache misses that each task's resumption meets after the
other tasks' work has evicted its state (benchmarks/simulator.py measures the
whole simulator in a real run).
"""
from __future__ import annotations

import argparse
import os
import random
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # benchmarks/: common.py
from common import stats, table, write_results  # noqa: E402  (puts this checkout's mpips on the path)

from mpips.runtime.transport.scheduler import Scheduler

TASKS = 256
EVENTS = 100
REPEATS = 5
SIZES_KIB = (0, 64, 256, 1024)


def event_cost(kib: int, seed: int) -> float:
    """Seconds per event beyond the touches, one run of TASKS x EVENTS."""
    scheduler = Scheduler()
    rng = random.Random(seed)
    touching = [0.0]

    def body(buf, delays):
        for delay in delays:
            t = time.perf_counter()   # (timed at every size, none too: the same timer calls in each)
            if buf is not None:
                buf += 1
            touching[0] += time.perf_counter() - t
            scheduler.sleep(delay)

    for _ in range(TASKS):
        buf = np.zeros(kib * 128) if kib else None   # float64: 128 per KiB
        delays = [rng.random() for _ in range(EVENTS)]
        scheduler.spawn("task", lambda buf=buf, delays=delays: body(buf, delays))
    t = time.perf_counter()
    scheduler.run()
    return (time.perf_counter() - t - touching[0]) / (TASKS * EVENTS)


def main() -> int:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
    runs = {kib: [] for kib in SIZES_KIB}
    for repeat in range(REPEATS):
        for kib in SIZES_KIB:
            runs[kib].append(event_cost(kib, repeat))
    us = {kib: stats(v) for kib, v in runs.items()}
    rows = [[kib, us[kib]["median_us"], us[kib]["min_us"], 1e6 * max(runs[kib]),
             us[kib]["median_us"] / us[0]["median_us"]] for kib in SIZES_KIB]
    markdown = (
        f"{TASKS} tasks x {EVENTS} events (a sleep each), each task touching its own buffer (read and "
        f"write) before each event; the touches timed from inside and left out. Sizes interleaved, "
        f"{REPEATS} runs each.\n\n"
        + table(["touched between events (KiB per task)", "us per event (median)", "min", "max",
                 "over none"], rows) + "\n")
    write_results("scheduler_events", {"tasks": TASKS, "events": EVENTS, "repeats": REPEATS,
                                       "seconds_per_event": {str(k): v for k, v in runs.items()}}, markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
