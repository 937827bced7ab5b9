"""The simulator's own cost: `mpips simulate` at 256 workers, every paradigm.

    python benchmarks/simulator.py                      # 256 workers x 40 iterations, every paradigm
    python benchmarks/simulator.py --profile bsp,gssp   # also cProfile those (results/simulator-profile-*.txt)

Each paradigm runs the digits MLP with 256 workers, `--iterations 40` (a
global budget of 256 x 40 x 16 samples, so about 10240 worker iterations),
an evaluator rank, and the shared-cluster mix of sim_common.py (persistent
slowdowns and random stragglers, so workers wait on each other), in a fresh
Python process (one paradigm's state cannot slow the next). In that process
the benchmark times, in wall and CPU time:

- set-up: simulate() up to the scheduler's start (data, model copies, one
  HDF5 log file per rank);
- the run: Scheduler.run (GSSP: its profiling run too);
- the real forward/backward: every Worker.compute_gradient call;
- the roles' own work, which an MPI rank does too (ROLE_WORK): the data
  batch's gather, a server's sum of its slots and optimizer step, the log's
  rows and flushes, an evaluation (less its pull). Each is timed around
  calls that never switch tasks, so their wall and CPU time are their own;
- the end: closing the logs, judging the run.

Per worker iteration: beyond fwd/bwd = (run - forward/backward) / worker
iterations, and of it the simulator = beyond fwd/bwd less the roles' own
work: the scheduler and the in-process transport (task switches, waits and
their checks, control-table reads and writes, pulls and pushes), plus the
roles' small untimed bookkeeping (views, paradigm decisions, building rows),
so an upper bound of the simulator proper. Goals: simulator < 100 us per
iteration, and each run < 2 minutes. CPU time is given beside wall time
because the machine is shared (2 cores).
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


# The roles' own work, which an MPI rank does too: timed around calls that
# never switch tasks, so a call's wall and CPU time are its own.
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
    # the evaluation's pull sleeps (other tasks run): taken off evaluate's time
    ("mpips.runtime.evaluator", "Evaluator", "current_params", "-evaluation"),
)
PARTS = ("compute", "data", "server", "log", "evaluation")


def measure(overrides: dict, profile_path: str | None) -> dict:
    """One simulated job in this process, timed by parts (see the module doc)."""
    import importlib

    import mpips.runtime.scheduler
    import mpips.runtime.simulate
    from mpips.config import load
    from mpips.io.log import RunLog

    acc = {"run_wall": 0.0, "run_cpu": 0.0, "run_calls": 0, "first_run_at": None, "running": False,
           **{f"{part}_{k}": 0.0 for part in PARTS for k in ("wall", "cpu", "calls")}}
    schedulers = []
    depth = [0]   # role work inside role work (a row that flushes) counts once

    def timed(function, part):
        inner = part.startswith("-")   # a call inside another part that switches tasks
        part = part.lstrip("-")

        def call(*a, **k):
            if not acc["running"] or depth[0] and not inner:   # (set-up and end: not the run's)
                return function(*a, **k)
            outer, depth[0] = depth[0], 0 if inner else 1   # the tasks it switches to count their own
            w, c = time.perf_counter(), time.process_time()
            try:
                return function(*a, **k)
            finally:
                sign = -1 if inner else 1
                acc[f"{part}_wall"] += sign * (time.perf_counter() - w)
                acc[f"{part}_cpu"] += sign * (time.process_time() - c)
                acc[f"{part}_calls"] += not inner
                depth[0] = outer
        return call

    for module, owner, name, part in ROLE_WORK:
        holder = importlib.import_module(module)
        holder = getattr(holder, owner) if owner else holder
        setattr(holder, name, timed(getattr(holder, name), part))

    run = mpips.runtime.scheduler.Scheduler.run

    def timed_run(self):
        if acc["first_run_at"] is None:
            acc["first_run_at"] = time.perf_counter()
        w, c = time.perf_counter(), time.process_time()
        acc["running"] = True
        try:
            return run(self)
        finally:
            acc["running"] = False
            acc["run_wall"] += time.perf_counter() - w
            acc["run_cpu"] += time.process_time() - c
            acc["run_calls"] += 1
            acc["last_run_end"] = time.perf_counter()
            if self not in schedulers:
                schedulers.append(self)

    mpips.runtime.scheduler.Scheduler.run = timed_run

    cfg = load(None, overrides)
    shutil.rmtree(cfg.run_dir, ignore_errors=True)
    profiler = cProfile.Profile() if profile_path else None
    t0, c0 = time.perf_counter(), time.process_time()
    if profiler:
        profiler.enable()
    mpips.runtime.simulate.simulate(cfg)
    if profiler:
        profiler.disable()
    total_wall, total_cpu = time.perf_counter() - t0, time.process_time() - c0
    if profiler:
        text = io.StringIO()
        stats = pstats.Stats(profiler, stream=text)
        text.write(f"cProfile of one simulated job: {json.dumps({k: v for k, v in overrides.items() if k != 'slowdown'})}\n\n")
        stats.sort_stats("tottime").print_stats(40)
        stats.sort_stats("cumulative").print_stats(60)
        with open(profile_path, "w") as fh:
            fh.write(text.getvalue())

    summary = RunLog(cfg.run_dir).summary()
    iterations = int(acc["compute_calls"])
    work = {k: sum(acc[f"{p}_{k}"] for p in PARTS if p != "compute") for k in ("wall", "cpu")}
    sim_wall = acc["run_wall"] - acc["compute_wall"]
    sim_cpu = acc["run_cpu"] - acc["compute_cpu"]
    per = {f"{part}_us_per_iteration": 1e6 * acc[f"{part}_wall"] / iterations for part in PARTS}
    return {
        "workers": cfg.workers, "paradigm": cfg.paradigm, "groups": cfg.groups if cfg.paradigm == "gssp" else None,
        "profiled": bool(profiler),
        "total_wall_s": total_wall, "total_cpu_s": total_cpu,
        "setup_wall_s": acc["first_run_at"] - t0,
        "run_wall_s": acc["run_wall"], "run_cpu_s": acc["run_cpu"],
        "end_wall_s": t0 + total_wall - acc["last_run_end"],
        "compute_wall_s": acc["compute_wall"], "compute_cpu_s": acc["compute_cpu"],
        "optimizer_and_sum_wall_s": acc["server_wall"], "server_applies": int(acc["server_calls"]) // 2,
        "roles_work_wall_s": work["wall"], "roles_work_cpu_s": work["cpu"],
        "worker_iterations": iterations,
        **per,
        "sim_us_per_iteration": 1e6 * sim_wall / iterations,
        "sim_cpu_us_per_iteration": 1e6 * sim_cpu / iterations,
        "roles_work_us_per_iteration": 1e6 * work["wall"] / iterations,
        "roles_work_cpu_us_per_iteration": 1e6 * work["cpu"] / iterations,
        "simulator_us_per_iteration": 1e6 * (sim_wall - work["wall"]) / iterations,
        "simulator_cpu_us_per_iteration": 1e6 * (sim_cpu - work["cpu"]) / iterations,
        "switches": sum(s.switches for s in schedulers),
        "switches_per_iteration": sum(s.switches for s in schedulers) / iterations,
        "virtual_seconds": summary["wall_seconds"], "final_accuracy": summary["final_accuracy"],
        "updates": summary["updates"], "pushes": summary["pushes"],
    }


def run_one(paradigm: str, args, profile: bool) -> dict:
    """measure() in a fresh process; returns its result."""
    with tempfile.TemporaryDirectory(prefix="mpips-simbench-") as tmp:
        out = os.path.join(tmp, "out.json")
        cmd = [sys.executable, os.path.abspath(__file__), "--inner", out, "--paradigms", paradigm,
               "--workers", str(args.workers), "--iterations", str(args.iterations), "--groups", str(args.groups)]
        if profile:
            cmd += ["--profile", paradigm]
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
    args = p.parse_args()
    paradigms = [x for x in args.paradigms.split(",") if x]
    profiled = [x for x in args.profile.split(",") if x]

    if args.inner:   # one paradigm, in this process
        paradigm = paradigms[0]
        with tempfile.TemporaryDirectory(prefix="mpips-simbench-run-") as run_dir:
            path = (os.path.join(RESULTS, f"{args.name}-profile-{paradigm}.txt") if paradigm in profiled else None)
            result = measure(config_overrides(paradigm, args.workers, args.iterations, args.groups, run_dir), path)
        with open(args.inner, "w") as fh:
            json.dump(result, fh)
        return 0

    os.makedirs(RESULTS, exist_ok=True)
    results, profiles, began = [], [], time.perf_counter()
    for paradigm in paradigms:
        r = run_one(paradigm, args, profile=False)
        results.append(r)
        print(f"{paradigm}: {r['total_wall_s']:.1f} s, {r['sim_us_per_iteration']:.0f} us/iteration "
              f"beyond forward/backward, of which the simulator {r['simulator_us_per_iteration']:.0f}", flush=True)
    for paradigm in profiled:
        r = run_one(paradigm, args, profile=True)
        profiles.append(r)
        print(f"{paradigm} profiled: {r['total_wall_s']:.1f} s (under cProfile)", flush=True)

    headers = ["paradigm", "worker iterations", "total (s)", "set-up (s)", "run (s)", "end (s)",
               "fwd/bwd (us/it)", "beyond fwd/bwd (us/it)", "beyond fwd/bwd CPU (us/it)",
               "data", "server", "log", "evaluation", "simulator (us/it)", "simulator CPU (us/it)",
               "switches/it", "virtual (s)", "final acc", "goals"]
    rows = []
    for r in results:
        ok = r["simulator_us_per_iteration"] < GOAL_US and r["total_wall_s"] < GOAL_RUN_S
        name = r["paradigm"] + (f" (G={r['groups']})" if r["groups"] else "")
        rows.append([name, r["worker_iterations"], r["total_wall_s"], r["setup_wall_s"], r["run_wall_s"],
                     r["end_wall_s"], r["compute_us_per_iteration"],
                     r["sim_us_per_iteration"], r["sim_cpu_us_per_iteration"],
                     *(r[f"{part}_us_per_iteration"] for part in PARTS[1:]),
                     r["simulator_us_per_iteration"], r["simulator_cpu_us_per_iteration"],
                     r["switches_per_iteration"], r["virtual_seconds"], r["final_accuracy"],
                     "met" if ok else ("run > 2 min; " if r["total_wall_s"] >= GOAL_RUN_S else "")
                     + ("> 100 us/it" if r["simulator_us_per_iteration"] >= GOAL_US else "")])
    md = (f"{args.workers} workers x `--iterations {args.iterations}`, digits MLP, batch 16, `--evaluator`, "
          f"device time 20 ms (the simulator's default), cluster: {sim_common.DESCRIPTION}; GSSP "
          f"`--groups {args.groups}`. Each paradigm in a fresh process; total {time.perf_counter() - began:.0f} s.\n\n"
          "Per worker iteration, wall time unless CPU is said: beyond fwd/bwd = (scheduler run - "
          "forward/backward) / worker iterations; of it, the roles' own work, which an MPI rank does too, "
          "timed around its calls: data (the batch's gather), server (the sum of the pushed slots and the "
          "optimizer step), log (rows, events, HDF5 flushes), evaluation (less its pull); simulator = beyond "
          "fwd/bwd less that work: the scheduler and the in-process transport (task switches, waits and "
          "their checks, control-table reads and writes, pulls and pushes), with the roles' untimed "
          "bookkeeping (views, paradigm decisions, building rows). The goal is judged on the simulator "
          "column: the rest would be spent by the same roles under MPI. "
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
