"""`python -m mpips syncswitch-search`: find Sync-Switch's f for a recurring job.

Binary search over short runs (docs/paradigms.md, Sync-Switch): the smallest
fraction f of the sample budget to train in BSP whose final accuracy, the
mean over --seeds, is within a tolerance (default 0.5 points) of pure BSP's.
It launches each run with the given launcher (`mpiexec -n N python -m mpips
train FLAGS --switch-at f --seed S`), reads the run's log with `RunLog`, and
writes every run to `OUT/search.json` as soon as it is known, so an
interrupted search keeps them.

The bisection assumes accuracy does not fall as f grows (more BSP); f = 1 is
pure BSP, so with the default range [0, 1] the upper end needs no run. What
it measured is checked against that: where a smaller f was more accurate
than a larger one by more than the tolerance and the seeds' noise (falls),
the curve is not monotone on this job and the search says so and chooses
no f (exit status 1), instead of the f a bisection of that curve lands on
by chance (f = 1.0 after 94.2% at f = 0, 84.4% at 0.5, 78.0% at 0.9375,
one seed).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import signal
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from ..io.log import DiskFull, RunLog, writing
from ..io.outdir import folder_problem
from ..validate import number_in
from .launch import Launches, default_launcher, launcher_words


class SearchError(RuntimeError):
    """A run failed; the message names it and its output file."""


@dataclass
class Probe:
    """One value of f (None: the pure-BSP reference), over the seeds."""
    f: float | None
    accuracies: list[float] = field(default_factory=list)   # final accuracy of each seed's run
    run_dirs: list[str] = field(default_factory=list)
    wall_seconds: float = 0.0
    within: bool | None = None

    @property
    def final_accuracy(self) -> float:
        return sum(self.accuracies) / len(self.accuracies)

    @property
    def variance(self) -> float:
        """The seeds' sample variance (0 with one)."""
        n, m = len(self.accuracies), self.final_accuracy
        return sum((a - m) ** 2 for a in self.accuracies) / (n - 1) if n > 1 else 0.0

    def record(self) -> dict:
        return {**asdict(self), "final_accuracy": self.final_accuracy}

    def __str__(self) -> str:
        name = "BSP" if self.f is None else f"f = {self.f:.4f}"
        spread = (f" (seeds {100 * min(self.accuracies):.1f}-{100 * max(self.accuracies):.1f})"
                  if len(self.accuracies) > 1 else "")
        return f"{name}: {100 * self.final_accuracy:.1f}%{spread}"


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


def falls(probes: list[Probe], tolerance: float) -> tuple[Probe, Probe] | None:
    """Where the measured accuracy falls as f grows: the pair (smaller f,
    larger f; the reference is f = 1) whose means differ most, by more than
    `tolerance` (accuracy, a fraction) and the seeds' noise: twice the
    standard error of the difference, from the seeds' variance pooled over
    every f measured (two seeds alone tell little of their spread; the
    spread is the runs', whatever f). None where it does not fall."""
    dof = sum(len(p.accuracies) - 1 for p in probes)
    pooled = sum((len(p.accuracies) - 1) * p.variance for p in probes) / dof if dof else 0.0
    ordered = sorted(probes, key=lambda p: 1.0 if p.f is None else p.f)
    worst, gap = None, 0.0
    for k, a in enumerate(ordered):
        for b in ordered[k + 1:]:
            drop = a.final_accuracy - b.final_accuracy
            noise = 2 * math.sqrt(pooled * (1 / len(a.accuracies) + 1 / len(b.accuracies)))
            if drop > max(tolerance, noise) and drop > gap:
                worst, gap = (a, b), drop
    return worst


class ProbeRunner:
    """Launches one training run per (f, seed) and reads its final accuracy."""

    def __init__(self, *, ranks: int, launcher: str, flags: list[str], out: str, timeout: float | None,
                 launches: Launches):
        self.ranks = ranks
        self.launcher = launcher_words(launcher)   # ValueError: not one that can be started
        self.flags = list(flags)
        self.out = out
        self.timeout = timeout
        self.launches = launches

    def command(self, run_dir: str, f: float | None, seed: int = 0) -> list[str]:
        # Our flags go last: they win over the same flags in the user's. The search owns
        # its --out folder: a run again (a search repeated there) replaces the last.
        mode = ["--paradigm", "bsp"] if f is None else ["--paradigm", "syncswitch", "--switch-at", repr(f)]
        return [*self.launcher, "-n", str(self.ranks), sys.executable, "-m", "mpips", "train",
                *self.flags, *mode, "--seed", str(seed), "--run-dir", run_dir, "--overwrite"]

    def run(self, name: str, f: float | None, seeds: list[int]) -> Probe:
        probe = Probe(f)
        start = time.perf_counter()
        for seed in seeds:
            run_dir = os.path.join(self.out, f"{name}-s{seed}")
            output = run_dir + ".out"
            code = self.launches.run_to_file(self.command(run_dir, f, seed), output, self.timeout,
                                             relay=signal.SIGUSR1)
            if self.launches.stopped:
                raise SearchError(f"stopped on {signal.Signals(self.launches.stopped).name} "
                                  f"(the runs so far: {self.out}/search.json)")
            if code is None:
                raise SearchError(f"{name}, seed {seed}: no result within {self.timeout:g}s (see {output})")
            if code != 0:
                raise SearchError(f"{name}, seed {seed}: the run exited {code} (see {output})")
            accuracy = RunLog(run_dir).summary()["final_accuracy"]
            if accuracy is None:
                raise SearchError(f"{name}, seed {seed}: the run logged no evaluation (see {output})")
            probe.accuracies.append(float(accuracy))
            probe.run_dirs.append(run_dir)
        probe.wall_seconds = time.perf_counter() - start
        return probe


def search(run: Callable[[str, float | None], Probe], *, low: float, high: float, tolerance: float,
           steps: int, report: Callable[[dict, Probe | None], None], about: dict | None = None) -> dict:
    """Run the reference and the probes (`run(name, f)`); `report(record,
    probe)` follows each, and the end (probe None). `tolerance`: in points."""
    record: dict[str, Any] = {"range": [low, high], "tolerance_points": tolerance, "steps": steps, **(about or {}),
                              "reference": None, "probes": [], "bisection": None, "chosen": None,
                              "monotone": None, "falls": None}
    reference = run("reference-bsp", None)
    record["reference"] = reference.record()
    report(record, reference)
    floor = reference.final_accuracy - tolerance / 100
    probes: list[Probe] = []

    def within(f: float) -> bool:
        probe = run(f"probe-{len(probes):02d}-f{f:.4f}", f)
        probe.within = probe.final_accuracy >= floor
        probes.append(probe)
        record["probes"].append(probe.record())
        report(record, probe)
        return probe.within

    record["bisection"] = bisect(within, low, high, steps)
    fall = falls([reference, *probes], tolerance / 100)
    record["monotone"] = fall is None
    record["falls"] = None if fall is None else [str(fall[0]), str(fall[1])]
    record["chosen"] = record["bisection"] if fall is None else None
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
    p.add_argument("--seeds", default="0,1",
                   help="comma-separated seeds: each f is the mean of a run per seed, and their spread "
                        "is the noise against which the curve is judged monotone [0,1]")
    p.add_argument("--launcher", default=default_launcher(),
                   help="command that starts N ranks with -n N, e.g. 'srun --mpi=pmix' [mpiexec]")
    p.add_argument("--timeout", type=number_in(0, 1e9, low_open=True), default=None, help="seconds one run may take [none]")
    p.add_argument("train_flags", nargs=argparse.REMAINDER,
                   help="flags of `python -m mpips train` for every run (after --)")


def _fail(message: str, code: int = 2) -> int:
    print(f"mpips: error: {message}", file=sys.stderr, flush=True)
    return code


def cmd_search(args) -> int:
    from .compare import OptionError, parse_seeds

    flags = args.train_flags[1:] if args.train_flags[:1] == ["--"] else args.train_flags
    if not 0.0 <= args.low < args.high <= 1.0:
        return _fail(f"need 0 <= --low < --high <= 1 (got {args.low}, {args.high})")
    if args.steps < 0 or args.ranks < 2:
        return _fail("need --steps >= 0 and --ranks >= 2")
    try:
        seeds = parse_seeds(args.seeds)
    except OptionError as e:
        return _fail(str(e))
    out = args.out or os.path.join("runs", time.strftime("%Y%m%d-%H%M%S") + "-syncswitch-search")
    try:
        launcher_words(args.launcher)
    except ValueError as e:
        return _fail(f"invalid --launcher {args.launcher!r}: {e}")
    why = folder_problem(out)   # before any run
    if why:
        return _fail(f"invalid --out {out!r}: cannot write there ({why})")
    path = os.path.join(out, "search.json")

    def report(record: dict, probe: Probe | None) -> None:
        with writing(path), open(path + ".tmp", "w") as fh:
            json.dump(record, fh, indent=1)
        os.replace(path + ".tmp", path)
        if probe is not None:
            verdict = "" if probe.within is None else ("  within" if probe.within else "  below")
            print(f"mpips: {probe}  ({probe.wall_seconds:.1f}s){verdict}", flush=True)

    with Launches() as launches:
        runner = ProbeRunner(ranks=args.ranks, launcher=args.launcher, flags=flags, out=out,
                             timeout=args.timeout, launches=launches)
        try:
            record = search(lambda name, f: runner.run(name, f, seeds), low=args.low, high=args.high,
                            tolerance=args.tolerance, steps=args.steps, report=report,
                            about={"seeds": seeds, "launcher": runner.launcher, "ranks": runner.ranks,
                                   "train_flags": runner.flags})
        except SearchError as e:
            return _fail(str(e), 128 + launches.stopped if launches.stopped else 1)
        except DiskFull as e:
            return _fail(str(e), 1)
    if not record["monotone"]:
        higher, lower = record["falls"]
        measured = "; ".join(str(p) for p in _measured(record))
        print(f"mpips: no f chosen: the accuracy does not grow with f on this job over seeds {args.seeds}: "
              f"{higher}, more than {lower}, by more than the tolerance ({args.tolerance:g} points) and the "
              f"seeds' noise; a binary search on such a curve lands by chance (here on f = "
              f"{record['bisection'] if record['bisection'] is not None else 1.0:.4f}). Measured: {measured}. "
              f"More --seeds or longer runs, or compare values of f directly (mpips compare --paradigms "
              f"syncswitch:switch_at=F,...)  [{path}]")
        return 1
    chosen = record["chosen"]
    if chosen is None:
        print(f"mpips: no f in [{args.low}, {args.high}] is within {args.tolerance} points of BSP; "
              f"use BSP (f = 1)  [{path}]")
    else:
        print(f"mpips: chosen f = {chosen:.4f} (--switch-at {chosen:.4f}), the mean over seeds {args.seeds} "
              f"within {args.tolerance:g} points of BSP's  [{path}]")
    return 0


def _measured(record: dict) -> list[Probe]:
    """The record's reference and probes, smallest f first (BSP last)."""
    probes = [Probe(p["f"], p["accuracies"]) for p in [*record["probes"], record["reference"]]]
    return sorted(probes, key=lambda p: 1.0 if p.f is None else p.f)
