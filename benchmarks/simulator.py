"""The simulator's own cost: `mpips simulate` at 256 workers, every paradigm.

    python benchmarks/simulator.py                      # 256 workers x 40 iterations, every paradigm
    python benchmarks/simulator.py --profile bsp,gssp   # also cProfile those (results/simulator-profile-*.txt)

Each paradigm runs the digits MLP with 256 workers, `--iterations 40` (a
global budget of 256 x 40 x 16 samples, so about 10240 worker iterations),
an evaluator rank, and the shared-cluster mix of sim_common.py (persistent
slowdowns and random stragglers, so workers wait on each other), twice,
each time in a fresh Python process (one paradigm's state cannot slow the
next):

- timed as a whole: set-up (simulate() up to the scheduler's start: data,
  model copies, one HDF5 log file per rank), the run (Scheduler.run; GSSP:
  its profiling run too), the real forward/backward (every
  Worker.compute_gradient call) and the end (closing the logs, judging the
  run). Beyond fwd/bwd = (run - forward/backward) / worker iterations.
  Goal: each run < 2 minutes.
- timed by modes that take turns (`Modes`: each wrapped call switches the
  mode for its duration, and a task switched out resumes in the mode it
  left), so every second of the run is in exactly one of them:
  - the simulator proper: the scheduler's loop between tasks, and every
    call into the scheduler or the in-process transport (sleeps, waits,
    control-table reads and writes, pulls and pushes), less the time its
    task was switched out and a wait's readiness checks. Goal: < 100 us per
    worker iteration;
  - the roles' own work, which an MPI rank does too (ROLE_WORK): the
    forward/backward, the data batch's gather, a server's sum of its slots
    and optimizer step, the log's rows and flushes, an evaluation;
  - the roles' bookkeeping: the rest of their code (views, paradigm
    decisions, building rows, the readiness checks of waits), which every
    rank runs under MPI too.
  The wrappers cost time themselves (this run is slower than the first),
  part of it inside the simulator's mode: its figure is an upper bound.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from common import RESULTS, table, write_results  # noqa: E402  (puts this checkout's mpips on the path)
import sim_common  # noqa: E402

PARADIGMS = ("bsp", "asp", "ssp", "dssp", "gssp", "syncswitch", "lbbsp", "vsgd")
GOAL_US = 100.0
GOAL_RUN_S = 120.0


def config_overrides(paradigm: str, workers: int, iterations: int, groups: int, run_dir: str) -> dict:
    o = {"paradigm": paradigm, "workers": workers, "iterations": iterations, "evaluator": True,
         "run_dir": run_dir, **sim_common.options(workers)}
    if paradigm == "gssp":
        o["groups"] = groups
    return o


# Where a simulated run's time goes, as modes that take turns: the
# simulator proper (the scheduler's loop between tasks, and every call into
# the scheduler or the in-process transport, less the time its task was
# switched out and less a wait's readiness checks), the roles' own work that
# an MPI rank does too (PARTS, timed around their calls), and the rest of the
# roles' code (their bookkeeping: views, paradigm decisions, rows, the checks
# of waits). Each call below switches the mode for its duration; a task
# switched out and in again resumes in the mode it left.
SIMULATOR = (
    # (the scheduler's read, changed and depends_on: called by the transport only)
    ("mpips.runtime.scheduler", "Scheduler", ("sleep", "wait_until")),
    ("mpips.runtime.local_transport", "LocalParameterStore", ("pull", "push", "push_sparse", "take_gradient",
                                                              "publish")),
    ("mpips.runtime.local_transport", "LocalControlTable", ("read", "read_cells", "write", "add", "waits_for")),
)
# (module, class or None, function, part)
ROLE_WORK = (
    ("mpips.runtime.worker", "Worker", "compute_gradient", "compute"),
    ("mpips.training.data", "GlobalStream", "batch", "data"),
    ("mpips.training.data", "WorkerShard", "next_batch", "data"),
    ("mpips.training.optim", "ServerOptimizer", "step", "server"),
    ("mpips.runtime.local_transport", None, "sum_slots", "server"),   # a server's sum of its slots
    ("mpips.io.log", "RankLog", "row", "log"),
    ("mpips.io.log", "RankLog", "event", "log"),
    ("mpips.io.log", "RankLog", "flush", "log"),
    ("mpips.runtime.evaluator", "Evaluator", "evaluate", "evaluation"),
)
PARTS = ("compute", "data", "server", "log", "evaluation")
MODES = ("simulator", "roles", *PARTS)


class Modes:
    """Wall time per mode: `enter(mode)` makes `mode` the current one and
    returns the one it replaced, for `enter(previous)` on the way out."""

    def __init__(self):
        self.seconds = dict.fromkeys(MODES, 0.0)
        self.calls = dict.fromkeys(MODES, 0)
        self.mode = "simulator"
        self.since = time.perf_counter()

    def enter(self, mode: str) -> str:
        now = time.perf_counter()
        self.seconds[self.mode] += now - self.since
        self.since, previous, self.mode = now, self.mode, mode
        return previous

    def wrap(self, function, mode: str):
        seconds, calls, clock = self.seconds, self.calls, time.perf_counter

        def call(*a, **k):   # enter(mode), then enter(previous), inlined: they add to what they time
            now = clock()
            previous = self.mode
            seconds[previous] += now - self.since
            self.since, self.mode = now, mode
            calls[mode] += 1
            try:
                return function(*a, **k)
            finally:
                now = clock()
                seconds[mode] += now - self.since
                self.since, self.mode = now, previous
        return call


class _Main:
    """The scheduler's main greenlet, as the tasks switch to it: the time
    until the task runs again is not the task's mode."""

    def __init__(self, main, modes: Modes):
        self.main, self.modes = main, modes

    def switch(self, *a):
        previous = self.modes.enter("simulator")   # the scheduler's loop, and other tasks' modes
        try:
            return self.main.switch(*a)
        finally:
            self.modes.enter(previous)


def measure(overrides: dict, profile_path: str | None, split: bool) -> dict:
    """One simulated job in this process, timed (see the module doc); with
    `split`, every mode of MODES (the wrappers make the run slower)."""
    import importlib

    import mpips.runtime.scheduler as scheduler
    import mpips.runtime.simulate
    from mpips.config import load
    from mpips.io.log import RunLog

    modes = Modes()
    acc = {"run_wall": 0.0, "run_cpu": 0.0, "first_run_at": None, "last_run_end": None}
    schedulers = []
    wrapped = ROLE_WORK if split else ROLE_WORK[:1]   # unsplit: forward/backward alone
    for module, owner, name, part in wrapped:
        holder = importlib.import_module(module)
        holder = getattr(holder, owner) if owner else holder
        setattr(holder, name, modes.wrap(getattr(holder, name), part))
    if split:
        for module, owner, names in SIMULATOR:
            holder = getattr(importlib.import_module(module), owner)
            for name in names:
                setattr(holder, name, modes.wrap(getattr(holder, name), "simulator"))
        wait_until = scheduler.Scheduler.wait_until

        def checked_wait(self, ready, **kw):   # (itself wrapped as the simulator's, above)
            return wait_until(self, modes.wrap(ready, "roles"), **kw)
        scheduler.Scheduler.wait_until = modes.wrap(checked_wait, "simulator")
        spawn = scheduler.Scheduler.spawn

        def spawn_in_modes(self, name, body):
            def task():
                modes.enter("roles")
                try:
                    return body()
                finally:
                    modes.enter("simulator")   # back to the scheduler's loop

            # the task's greenlet has the real one as its parent; the task's sleeps
            # and waits switch to it through _Main
            main = self._main.main if isinstance(self._main, _Main) else self._main
            self._main = main
            spawned = spawn(self, name, task)
            self._main = _Main(main, modes)
            return spawned
        scheduler.Scheduler.spawn = spawn_in_modes

    run = scheduler.Scheduler.run

    def timed_run(self):
        if acc["first_run_at"] is None:
            acc["first_run_at"] = time.perf_counter()
        modes.enter("simulator")
        before = dict(modes.seconds)
        w, c = time.perf_counter(), time.process_time()
        try:
            return run(self)
        finally:
            acc["run_wall"] += time.perf_counter() - w
            acc["run_cpu"] += time.process_time() - c
            modes.enter("simulator")
            for m in MODES:   # only the runs' time: set-up and the end call these too
                acc[m] = acc.get(m, 0.0) + modes.seconds[m] - before[m]
            acc["last_run_end"] = time.perf_counter()
            if self not in schedulers:
                schedulers.append(self)

    scheduler.Scheduler.run = timed_run

    cfg = load(None, overrides)
    shutil.rmtree(cfg.run_dir, ignore_errors=True)
    profiler = cProfile.Profile() if profile_path else None
    t0 = time.perf_counter()
    if profiler:
        profiler.enable()
    mpips.runtime.simulate.simulate(cfg)
    if profiler:
        profiler.disable()
    total_wall = time.perf_counter() - t0
    if profiler:
        text = io.StringIO()
        stats = pstats.Stats(profiler, stream=text)
        text.write(f"cProfile of one simulated job: {json.dumps({k: v for k, v in overrides.items() if k != 'slowdown'})}\n\n")
        stats.sort_stats("tottime").print_stats(40)
        stats.sort_stats("cumulative").print_stats(60)
        with open(profile_path, "w") as fh:
            fh.write(text.getvalue())

    summary = RunLog(cfg.run_dir).summary()
    iterations = modes.calls["compute"]
    result = {
        "workers": cfg.workers, "paradigm": cfg.paradigm, "groups": cfg.groups if cfg.paradigm == "gssp" else None,
        "split": split, "profiled": bool(profiler), "worker_iterations": iterations,
        "total_wall_s": total_wall, "setup_wall_s": acc["first_run_at"] - t0,
        "run_wall_s": acc["run_wall"], "run_cpu_s": acc["run_cpu"],
        "end_wall_s": t0 + total_wall - acc["last_run_end"],
        "compute_wall_s": acc["compute"],
        "beyond_us_per_iteration": 1e6 * (acc["run_wall"] - acc["compute"]) / iterations,
        "switches": sum(s.switches for s in schedulers),
        "switches_per_iteration": sum(s.switches for s in schedulers) / iterations,
        "virtual_seconds": summary["wall_seconds"], "final_accuracy": summary["final_accuracy"],
        "updates": summary["updates"], "pushes": summary["pushes"],
    }
    if split:
        result.update({f"{m}_us_per_iteration": 1e6 * acc[m] / iterations for m in MODES})
    return result


def run_one(paradigm: str, args, *, split: bool = False, profile: bool = False) -> dict:
    """measure() in a fresh process; returns its result."""
    with tempfile.TemporaryDirectory(prefix="mpips-simbench-") as tmp:
        out = os.path.join(tmp, "out.json")
        cmd = [sys.executable, os.path.abspath(__file__), "--inner", out, "--paradigms", paradigm,
               "--workers", str(args.workers), "--iterations", str(args.iterations), "--groups", str(args.groups)]
        cmd += ["--split"] if split else []
        cmd += ["--profile", paradigm] if profile else []
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [os.path.dirname(HERE),
                                                                        os.environ.get("PYTHONPATH")]))}
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        if p.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}:\n{p.stdout[-4000:]}")
        with open(out) as fh:
            return json.load(fh)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--paradigms", default=",".join(PARADIGMS))
    p.add_argument("--workers", type=int, default=256)
    p.add_argument("--iterations", type=int, default=40, help="--iterations of each job (per worker, on average)")
    p.add_argument("--groups", type=int, default=16, help="GSSP's --groups")
    p.add_argument("--profile", default="", help="paradigms to run once more under cProfile")
    p.add_argument("--name", default="simulator", help="results/<name>.json and .md")
    p.add_argument("--inner", default="", help=argparse.SUPPRESS)
    p.add_argument("--split", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    paradigms = [x for x in args.paradigms.split(",") if x]
    profiled = [x for x in args.profile.split(",") if x]

    if args.inner:   # one paradigm, in this process
        paradigm = paradigms[0]
        with tempfile.TemporaryDirectory(prefix="mpips-simbench-run-") as run_dir:
            path = (os.path.join(RESULTS, f"{args.name}-profile-{paradigm}.txt") if paradigm in profiled else None)
            result = measure(config_overrides(paradigm, args.workers, args.iterations, args.groups, run_dir),
                             path, args.split)
        with open(args.inner, "w") as fh:
            json.dump(result, fh)
        return 0

    os.makedirs(RESULTS, exist_ok=True)
    results, profiles, began = [], [], time.perf_counter()
    for paradigm in paradigms:
        plain, split = run_one(paradigm, args), run_one(paradigm, args, split=True)
        results.append({"plain": plain, "split": split})
        print(f"{paradigm}: {plain['total_wall_s']:.1f} s, {plain['beyond_us_per_iteration']:.0f} us/iteration "
              f"beyond forward/backward; timed by modes: the simulator {split['simulator_us_per_iteration']:.0f}, "
              f"the roles' bookkeeping {split['roles_us_per_iteration']:.0f}", flush=True)
    for paradigm in profiled:
        r = run_one(paradigm, args, profile=True)
        profiles.append(r)
        print(f"{paradigm} profiled: {r['total_wall_s']:.1f} s (under cProfile)", flush=True)

    headers = ["paradigm", "worker iterations", "total (s)", "set-up (s)", "run (s)", "fwd/bwd (us/it)",
               "beyond fwd/bwd (us/it)", "timed: beyond fwd/bwd", "simulator", "roles' bookkeeping",
               *PARTS[1:], "switches/it", "virtual (s)", "final acc", "goals"]
    rows = []
    for r in results:
        plain, split = r["plain"], r["split"]
        sim = split["simulator_us_per_iteration"]
        ok = sim < GOAL_US and plain["total_wall_s"] < GOAL_RUN_S
        name = plain["paradigm"] + (f" (G={plain['groups']})" if plain["groups"] else "")
        rows.append([name, plain["worker_iterations"], plain["total_wall_s"], plain["setup_wall_s"],
                     plain["run_wall_s"], 1e6 * plain["compute_wall_s"] / plain["worker_iterations"],
                     plain["beyond_us_per_iteration"], split["beyond_us_per_iteration"], sim,
                     split["roles_us_per_iteration"], *(split[f"{part}_us_per_iteration"] for part in PARTS[1:]),
                     plain["switches_per_iteration"], plain["virtual_seconds"], plain["final_accuracy"],
                     "met" if ok else ("run > 2 min; " if plain["total_wall_s"] >= GOAL_RUN_S else "")
                     + (f"> {GOAL_US:g} us/it" if sim >= GOAL_US else "")])
    md = (f"{args.workers} workers x `--iterations {args.iterations}`, digits MLP, batch 16, `--evaluator`, "
          f"device time 20 ms (the simulator's default), cluster: {sim_common.DESCRIPTION}; GSSP "
          f"`--groups {args.groups}`. Each paradigm twice, each time in a fresh process; total "
          f"{time.perf_counter() - began:.0f} s.\n\n"
          "Per worker iteration, wall time. The first run is timed as a whole: beyond fwd/bwd = (the "
          "scheduler's run - forward/backward) / worker iterations. The second is timed by modes that take "
          "turns (its calls wrapped, so it runs slower): the simulator = the scheduler's loop between tasks "
          "and every call into the scheduler or the in-process transport (sleeps, waits, control-table "
          "reads and writes, pulls and pushes), less the time its task was switched out and a wait's "
          "readiness checks; the roles' own work, which an MPI rank does too, timed around its calls: data "
          "(the batch's gather), server (the sum of the pushed slots and the optimizer step), log (rows, "
          "events, HDF5 flushes), evaluation; and the rest of the roles' code, their bookkeeping (views, "
          "paradigm decisions, building rows, the checks of waits), which every rank runs under MPI too. "
          f"Goals: simulator < {GOAL_US:g} us per iteration and < {GOAL_RUN_S:g} s per run.\n\n"
          + table(headers, rows) + "\n")
    if profiles:
        md += ("\nProfiled (cProfile, which slows Python calls about 2x): "
               + ", ".join(f"[{r['paradigm']}]({args.name}-profile-{r['paradigm']}.txt) "
                           f"{r['total_wall_s']:.0f} s" for r in profiles) + "\n")
    write_results(args.name, {"settings": vars(args), "cluster": sim_common.DESCRIPTION, "results": results,
                              "profiles": profiles}, md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
