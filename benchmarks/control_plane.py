"""Control plane: latency of one gate decision, as a worker makes it.

    python benchmarks/control_plane.py     # a 2-rank MPI job: the table's home and one worker

One decision is what `Worker._gate` does per poll: `ControlWindow.read()` (one
`Get` + `Flush` of the table on server 0), `ControlWindow.view()` (the
paradigm's `ClusterView`) and `paradigm.gate()`. It is timed for every
paradigm in `mpips.paradigms.available()`, with tables sized for 4 and 8
workers, in two states: "pass" (every worker at the same clock, advanced
between decisions, so stateful paradigms decide afresh) and "wait" (the worker
20 clocks ahead of the others: every bounded paradigm refuses; repeated polls).
Goal: median <= 5 us.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

from common import quiet_barrier, run_inner, stats, table, write_results

WORKERS = (4, 8)
REPS = 3000
WARMUP = 1000   # untimed decisions first: caches and the CPU clock settle
WARMUP_SECONDS = 1.0   # and once, before the first: reads, so the first paradigm is not the slowest
GOAL_US = 5.0
AHEAD = 20


def _set_clocks(control, clocks) -> None:
    """Worker rows and server 0's applied counts, as if every push were applied."""
    from mpips.runtime.state import S, W

    for j, c in enumerate(clocks):
        control.write(control.worker_offset(j, W.CLOCK), [c])
    control.write(control.server_offset(0, len(S)), clocks)  # applied counts follow S (Server.publish)
    control.write(control.server_offset(0, S.PUSHES), [sum(clocks)])


def measure(control, paradigm, t0: float, *, ahead: int) -> dict:
    """Time REPS decisions of worker 0: read, view and gate, and all three."""
    parts = {"read": [], "view": [], "gate": [], "decision": []}
    clock = 1
    clocks = [clock + ahead] + [clock] * (control.workers - 1)
    _set_clocks(control, clocks)
    for rep in range(WARMUP + REPS):
        if not ahead:  # a new clock every time: stateful paradigms decide, not recall
            clock += 1
            _set_clocks(control, [clock] * control.workers)
        a = time.perf_counter()
        snap = control.read()
        b = time.perf_counter()
        view = control.view(snap, time.time() - t0)
        c = time.perf_counter()
        gate = paradigm.gate(0, view)
        d = time.perf_counter()
        if rep >= WARMUP:
            for name, dt in (("read", b - a), ("view", c - b), ("gate", d - c), ("decision", d - a)):
                parts[name].append(dt)
    out = {name: stats(v) for name, v in parts.items()}
    out["ok"] = bool(gate.ok)
    return out


def inner(path: str) -> None:
    from mpi4py import MPI

    from mpips.config import Config
    from mpips.paradigms import available, make_paradigm
    from mpips.runtime.transport.mpi import ControlWindow

    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    results = {}
    t0 = time.time()
    for workers in WORKERS:
        control = ControlWindow(comm, 0, workers, 1)
        if rank == 1 and workers == WORKERS[0]:
            until = time.perf_counter() + WARMUP_SECONDS
            while time.perf_counter() < until:
                control.view(control.read(), 0.0)
        for name in available():
            for state, ahead in (("pass", 0), ("wait", AHEAD)):
                key = f"{workers}/{name}/{state}"
                if rank == 1:
                    try:
                        paradigm = make_paradigm(Config(paradigm=name), workers)
                        results[key] = measure(control, paradigm, t0, ahead=ahead)
                    except Exception as e:  # noqa: BLE001 - a paradigm this set-up cannot build
                        results[key] = {"skipped": f"{type(e).__name__}: {e}"}
                quiet_barrier(comm)  # the home rank sleeps meanwhile, as a server would
        quiet_barrier(comm)
        control.free()
    if rank == 1:
        with open(path, "w") as fh:
            json.dump(results, fh)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--inner", metavar="JSON", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.inner:
        return inner(args.inner)
    results = run_inner(__file__, 2)
    rows = []
    for key, r in results.items():
        workers, name, state = key.split("/")
        if "skipped" in r:
            rows.append([workers, name, state, None, None, None, None, None, None, r["skipped"]])
            continue
        d = r["decision"]
        rows.append([workers, name, state, d["median_us"], d["min_us"], d["p99_us"], r["read"]["median_us"],
                     r["view"]["median_us"], r["gate"]["median_us"],
                     "met" if d["median_us"] <= GOAL_US else f"not met ({d['median_us'] / GOAL_US:.1f}x)"])
    md = (f"One decision = `ControlWindow.read()` + `ControlWindow.view()` + `paradigm.gate()`, "
          f"{REPS} decisions each (after {WARMUP} untimed); 'pass': all workers at one clock, 'wait': the deciding worker "
          f"{AHEAD} clocks ahead.\n\n"
          + table(["workers", "paradigm", "state", "decision median us", "min us", "p99 us",
                   "read median us", "view median us", "gate median us",
                   f"goal (median <= {GOAL_US:g} us)"], rows))
    write_results("control_plane", {"goal_median_us": GOAL_US, "repetitions": REPS, "results": results}, md)


if __name__ == "__main__":
    sys.exit(main())
