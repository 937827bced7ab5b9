"""`python -m mpips syncswitch-search`: find Sync-Switch's f for a recurring job.

Binary search over short runs (docs/paradigms.md, Sync-Switch): the smallest
fraction f of the sample budget to train in BSP whose final accuracy is within
a tolerance (default 0.5 points) of pure BSP's. It launches each run with the
given launcher (`mpiexec -n N python -m mpips train FLAGS --switch-at f`),
reads the run's log with `RunLog`, and writes every probe to
`OUT/search.json` as soon as it is known, so an interrupted search keeps them.

The search assumes accuracy does not fall as f grows (more BSP). f = 1 is pure
BSP, so with the default range [0, 1] the upper end needs no probe.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable

from ..io.log import RunLog
from ..io.outdir import folder_problem
from ..validate import number_in
from .launch import default_launcher, launcher_words, run_to_file


class SearchError(RuntimeError):
    """A probe run failed; the message names it and its output file."""


@dataclass
class Probe:
    f: float | None           # None: the pure-BSP reference
    run_dir: str
    final_accuracy: float
    wall_seconds: float
    within: bool | None = None


def bisect(within: Callable[[float], bool], low: float, high: float, steps: int) -> float | None:
    """Smallest f in [low, high] (to (high-low)/2^steps) with within(f), or None
    when not even `high` is. f = 1 is pure BSP and is within by definition."""
    if high < 1.0 and not within(high):
        return None
    if within(low):
        return low
    for _ in range(steps):
        mid = (low + high) / 2
        if within(mid):
            high = mid
        else:
            low = mid
    return high


class ProbeRunner:
    """Launches one training run per probe and reads its final accuracy."""

    def __init__(self, *, ranks: int, launcher: str, flags: list[str], out: str, timeout: float | None):
        self.ranks = ranks
        self.launcher = launcher_words(launcher)   # ValueError: not one that can be started
        self.flags = list(flags)
        self.out = out
        self.timeout = timeout

    def command(self, run_dir: str, f: float | None) -> list[str]:
        # Our flags go last: they win over the same flags in the user's. The search owns
        # its --out folder: a probe run again (a search repeated there) replaces the last.
        mode = ["--paradigm", "bsp"] if f is None else ["--paradigm", "syncswitch", "--switch-at", repr(f)]
        return [*self.launcher, "-n", str(self.ranks), sys.executable, "-m", "mpips", "train",
                *self.flags, *mode, "--run-dir", run_dir, "--overwrite"]

    def run(self, name: str, f: float | None) -> Probe:
        run_dir = os.path.join(self.out, name)
        cmd = self.command(run_dir, f)
        output = run_dir + ".out"
        start = time.perf_counter()
        code = run_to_file(cmd, output, self.timeout)
        if code is None:
            raise SearchError(f"{name}: no result within {self.timeout:g}s (see {output})")
        if code != 0:
            raise SearchError(f"{name}: the run exited {code} (see {output})")
        accuracy = RunLog(run_dir).summary()["final_accuracy"]
        if accuracy is None:
            raise SearchError(f"{name}: the run logged no evaluation (see {output})")
        return Probe(f, run_dir, float(accuracy), time.perf_counter() - start)


def search(runner: ProbeRunner, *, low: float, high: float, tolerance: float, steps: int,
           report: Callable[[dict, Probe | None], None]) -> dict:
    """Run the reference and the probes; `report(record, probe)` follows each
    run, and the end (probe None)."""
    record: dict[str, Any] = {"range": [low, high], "tolerance_points": tolerance, "steps": steps,
              "launcher": runner.launcher, "ranks": runner.ranks, "train_flags": runner.flags,
              "reference": None, "probes": [], "chosen": None}
    reference = runner.run("reference-bsp", None)
    record["reference"] = asdict(reference)
    report(record, reference)
    floor = reference.final_accuracy - tolerance / 100

    def within(f: float) -> bool:
        probe = runner.run(f"probe-{len(record['probes']):02d}-f{f:.4f}", f)
        probe.within = probe.final_accuracy >= floor
        record["probes"].append(asdict(probe))
        report(record, probe)
        return probe.within

    record["chosen"] = bisect(within, low, high, steps)
    report(record, None)
    return record


def add_parser(sub) -> None:
    p = sub.add_parser("syncswitch-search",
                       help="find Sync-Switch's BSP fraction f by binary search over short runs",
                       description=__doc__.split("\n\n")[1],
                       usage="python -m mpips syncswitch-search -n RANKS [options] [-- TRAIN FLAGS]")
    p.add_argument("-n", "--ranks", type=int, required=True, help="MPI ranks of each run")
    p.add_argument("--out", default="", help="directory for the runs and search.json "
                                             "[default: runs/<time>-syncswitch-search]")
    p.add_argument("--low", type=number_in(0, 1), default=0.0, help="smallest f searched [0.0]")
    p.add_argument("--high", type=number_in(0, 1), default=1.0, help="largest f searched [1.0 = pure BSP]")
    p.add_argument("--tolerance", type=number_in(0, 100), default=0.5,
                   help="accuracy points below pure BSP's that are still acceptable [0.5]")
    p.add_argument("--steps", type=int, default=4, help="bisection steps after the low end [4]")
    p.add_argument("--launcher", default=default_launcher(),
                   help="command that starts N ranks with -n N, e.g. 'srun --mpi=pmix' [mpiexec]")
    p.add_argument("--timeout", type=number_in(0, 1e9, low_open=True), default=None, help="seconds one run may take [none]")
    p.add_argument("train_flags", nargs=argparse.REMAINDER,
                   help="flags of `python -m mpips train` for every run (after --)")


def cmd_search(args) -> int:
    flags = args.train_flags[1:] if args.train_flags[:1] == ["--"] else args.train_flags
    if not 0.0 <= args.low < args.high <= 1.0:
        print(f"mpips: error: need 0 <= --low < --high <= 1 (got {args.low}, {args.high})", file=sys.stderr)
        return 2
    if args.steps < 0 or args.ranks < 2:
        print("mpips: error: need --steps >= 0 and --ranks >= 2", file=sys.stderr)
        return 2
    out = args.out or os.path.join("runs", time.strftime("%Y%m%d-%H%M%S") + "-syncswitch-search")
    try:
        runner = ProbeRunner(ranks=args.ranks, launcher=args.launcher, flags=flags, out=out,
                             timeout=args.timeout)
    except ValueError as e:
        print(f"mpips: error: invalid --launcher {args.launcher!r}: {e}", file=sys.stderr)
        return 2
    why = folder_problem(out)   # before any run
    if why:
        print(f"mpips: error: invalid --out {out!r}: cannot write there ({why})", file=sys.stderr)
        return 2
    path = os.path.join(out, "search.json")

    def report(record: dict, probe: Probe | None) -> None:
        with open(path + ".tmp", "w") as fh:
            json.dump(record, fh, indent=1)
        os.replace(path + ".tmp", path)
        if probe is not None:
            name = "BSP reference" if probe.f is None else f"f = {probe.f:.4f}"
            verdict = "" if probe.within is None else ("  within" if probe.within else "  below")
            print(f"mpips: {name:<14} accuracy {100 * probe.final_accuracy:5.1f}%  "
                  f"({probe.wall_seconds:.1f}s){verdict}", flush=True)

    try:
        record = search(runner, low=args.low, high=args.high, tolerance=args.tolerance,
                        steps=args.steps, report=report)
    except SearchError as e:
        print(f"mpips: error: {e}", file=sys.stderr)
        return 1
    chosen = record["chosen"]
    if chosen is None:
        print(f"mpips: no f in [{args.low}, {args.high}] is within {args.tolerance} points of BSP; "
              f"use BSP (f = 1)  [{path}]")
    else:
        print(f"mpips: chosen f = {chosen:.4f} (--switch-at {chosen:.4f})  [{path}]")
    return 0
