"""The simulator's own cost: `mpips simulate` at 256 workers, every paradigm.

    python benchmarks/simulator.py                      # 256 workers x 40 iterations, every paradigm
    python benchmarks/simulator.py --profile bsp,gssp   # also cProfile those (results/simulator-profile-*.txt)
    python benchmarks/simulator.py --models mlp,sim_common:linear
                                    # each paradigm with the MLP, then with one linear layer

Needs py-spy (`pip install py-spy`). Each paradigm runs the digits MLP with
256 workers, `--iterations 40` (a global budget of 256 x 40 x 16 samples,
so about 10240 worker iterations), an evaluator rank, and the
shared-cluster mix of sim_common.py (persistent slowdowns and random
stragglers, so workers wait on each other), twice, each time in a fresh
Python process (one paradigm's state cannot slow the next):

- timed as a whole: set-up (simulate() up to the scheduler's start: data,
  model copies, one HDF5 log file per rank), the run (Scheduler.run; GSSP:
  its profiling run too), the real forward/backward (every
  Worker.compute_gradient call) and the end (closing the logs, judging the
  run). Beyond fwd/bwd = (run - forward/backward) / worker iterations.
  Goal: each run < 2 minutes.
- sampled: the same job under py-spy (SAMPLE_RATE stacks a second, from
  another process: nothing but the forward/backward is timed from inside),
  each sample of the run given to the innermost frame that says whose work
  it is (`mode_of`):
  - the simulator proper: the scheduler and the in-process transport
    (mpips/runtime/transport/scheduler.py, local_transport.py): the loop between tasks,
    task switches, sleeps, waits, control-table reads and writes, the
    bookkeeping of pulls and pushes. Goal: < 100 us per worker iteration;
  - transfers: the bytes of pulls and pushes copied (local_transport.move),
    which an MPI Get or Put moves too, and which grow with the model;
  - the roles' own work, which an MPI rank does too (ROLE_WORK): the
    forward/backward, the data batch's gather, a server's sum of its slots
    and optimizer step, the log's rows and flushes, an evaluation;
  - the roles' bookkeeping: the rest of their code (views, paradigm
    decisions, building rows, the checks of waits), which every rank runs
    under MPI too.
  The first run's time beyond fwd/bwd is split in the shares of these
  samples (sampling slows the sampled run, so its own times are not used).
"""
from __future__ import annotations

import argparse
import collections
import cProfile
import io
import json
import os
import pstats
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import sim_common  # noqa: E402
from common import RESULTS, table, write_results  # noqa: E402  (puts this checkout's mpips on the path)

PARADIGMS = ("bsp", "asp", "ssp", "dssp", "gssp", "syncswitch", "lbbsp", "vsgd")
GOAL_US = 100.0
GOAL_RUN_S = 120.0
SAMPLE_RATE = 250   # stacks per second: a few thousand per run, each pause of the run brief


def config_overrides(paradigm: str, workers: int, iterations: int, groups: int, run_dir: str,
                     model: str = "mlp") -> dict:
    o = {"paradigm": paradigm, "workers": workers, "iterations": iterations, "evaluator": True,
         "run_dir": run_dir, "model": model, **sim_common.options(workers)}
    if paradigm == "gssp":
        o["groups"] = groups
    return o


# Whose work a sample is: the innermost frame of one of these functions
# (path, qualified name) decides; else the innermost frame of mpips: the
# simulator's files are the simulator proper, the rest the roles' bookkeeping.
ROLE_WORK = {
    ("mpips/runtime/roles/worker.py", "Worker.compute_gradient"): "compute",
    ("mpips/training/data.py", "GlobalStream.batch"): "data",
    ("mpips/training/data.py", "WorkerShard.next_batch"): "data",
    ("mpips/training/optim.py", "SGD.step"): "server",
    ("mpips/training/optim.py", "Adam.step"): "server",
    ("mpips/runtime/state.py", "sum_slots"): "server",   # a server's sum of its slots
    ("mpips/io/log.py", "RankLog.row"): "log",
    ("mpips/io/log.py", "RankLog.event"): "log",
    ("mpips/io/log.py", "RankLog.flush"): "log",
    ("mpips/runtime/roles/evaluator.py", "Evaluator.evaluate"): "evaluation",
    ("mpips/runtime/transport/local.py", "move"): "transfers",
}
SIMULATOR_FILES = ("mpips/runtime/transport/scheduler.py", "mpips/runtime/transport/local.py")
RUN = ("Scheduler.run", "Task.__init__.<locals>.run")   # the scheduler's loop, the bottom of a task's stack
PARTS = ("compute", "transfers", "data", "server", "log", "evaluation")
MODES = ("simulator", "roles", *PARTS)
_FRAME = re.compile(r"(.*) \((.*):\d+\)$")   # py-spy's raw format: "function (path:line)"


def mode_of(stack: list[tuple[str, str]]) -> str | None:
    """The mode of one sample, its frames (function, path) outermost first;
    None for a sample outside the scheduler's run (set-up, the end)."""
    if not any(function in RUN and path.endswith(SIMULATOR_FILES[0]) for function, path in stack):
        return None
    for function, path in reversed(stack):
        for (part_path, name), part in ROLE_WORK.items():
            if function == name and path.endswith(part_path):
                return part
        if "mpips/" in path:
            return "simulator" if path.endswith(SIMULATOR_FILES) else "roles"
    return "simulator"   # (inside the scheduler's loop, in no Python frame of mpips)


def sampled_modes(raw_path: str) -> dict:
    """Samples per mode in a py-spy raw (collapsed stacks) file."""
    counts = collections.Counter()
    with open(raw_path) as fh:
        for line in fh:
            stack, n = line.rstrip().rsplit(" ", 1)
            frames = [(m.group(1), m.group(2)) for m in map(_FRAME.match, stack.split(";")) if m]
            mode = mode_of(frames)
            if mode:
                counts[mode] += int(n)
    return {m: counts[m] for m in MODES}


def measure(overrides: dict, profile_path: str | None) -> dict:
    """One simulated job in this process, timed as a whole (see the module doc)."""
    import mpips.runtime.job.simulate
    import mpips.runtime.transport.scheduler as scheduler
    from mpips.config import load
    from mpips.io.log import RunLog
    from mpips.runtime.roles.worker import Worker

    acc = {"run_wall": 0.0, "run_cpu": 0.0, "compute": 0.0, "iterations": 0, "first_run_at": None,
           "last_run_end": None}
    schedulers = []
    compute_gradient = Worker.compute_gradient

    def timed_compute(self, x, y):
        t = time.perf_counter()
        try:
            return compute_gradient(self, x, y)
        finally:
            acc["compute"] += time.perf_counter() - t
            acc["iterations"] += 1
    Worker.compute_gradient = timed_compute

    run = scheduler.Scheduler.run

    def timed_run(self):
        if acc["first_run_at"] is None:
            acc["first_run_at"] = time.perf_counter()
        w, c = time.perf_counter(), time.process_time()
        try:
            return run(self)
        finally:
            acc["run_wall"] += time.perf_counter() - w
            acc["run_cpu"] += time.process_time() - c
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
    mpips.runtime.job.simulate.simulate(cfg)
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
    iterations = acc["iterations"]
    switches = sum(s.switches for s in schedulers)
    return {
        "workers": cfg.workers, "paradigm": cfg.paradigm, "groups": cfg.options.groups if cfg.paradigm == "gssp" else None,
        "profiled": bool(profiler), "worker_iterations": iterations,
        "total_wall_s": total_wall, "setup_wall_s": acc["first_run_at"] - t0,
        "run_wall_s": acc["run_wall"], "run_cpu_s": acc["run_cpu"],
        "end_wall_s": t0 + total_wall - acc["last_run_end"],
        "compute_wall_s": acc["compute"],
        "beyond_us_per_iteration": 1e6 * (acc["run_wall"] - acc["compute"]) / iterations,
        "switches": switches, "switches_per_iteration": switches / iterations,
        "virtual_seconds": summary["wall_seconds"], "final_accuracy": summary["final_accuracy"],
        "updates": summary["updates"], "pushes": summary["pushes"],
    }


def py_spy() -> str:
    found = shutil.which("py-spy") or shutil.which("py-spy", path=os.path.dirname(sys.executable))
    if not found:
        raise SystemExit("benchmarks/simulator.py samples with py-spy: pip install py-spy")
    return found


def run_one(paradigm: str, model: str, args, *, sampled: bool = False, profile: bool = False) -> dict:
    """measure() in a fresh process (`sampled`: under py-spy); returns its
    result (`sampled`: with the samples per mode)."""
    with tempfile.TemporaryDirectory(prefix="mpips-simbench-") as tmp:
        out, raw = os.path.join(tmp, "out.json"), os.path.join(tmp, "samples.txt")
        cmd = [sys.executable, os.path.abspath(__file__), "--inner", out, "--paradigms", paradigm,
               "--workers", str(args.workers), "--iterations", str(args.iterations), "--groups", str(args.groups),
               "--models", model]
        cmd += ["--profile", paradigm] if profile else []
        if sampled:
            cmd = [py_spy(), "record", "--rate", str(SAMPLE_RATE), "--idle", "--format", "raw", "--output", raw,
                   "--", *cmd]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [os.path.dirname(HERE),
                                                                        os.environ.get("PYTHONPATH")]))}
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        if p.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}:\n{p.stdout[-4000:]}")
        with open(out) as fh:
            result = json.load(fh)
        if sampled:
            result["samples"] = sampled_modes(raw)
        return result


def split(plain: dict, samples: dict) -> dict:
    """The plain run's time beyond fwd/bwd, per worker iteration, in the
    shares of the sampled run's samples beyond fwd/bwd."""
    beyond = sum(n for m, n in samples.items() if m != "compute")
    return {m: plain["beyond_us_per_iteration"] * samples[m] / beyond for m in MODES if m != "compute"}


def compute_share(sampled: dict) -> float:
    """The forward/backward's share of the sampled run's samples: beside the
    share timed in the first run, the check of the sampling (the one mode
    timed both ways)."""
    return sampled["samples"]["compute"] / sum(sampled["samples"].values())


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--paradigms", default=",".join(PARADIGMS))
    p.add_argument("--workers", type=int, default=256)
    p.add_argument("--iterations", type=int, default=40, help="--iterations of each job (per worker, on average)")
    p.add_argument("--groups", type=int, default=16, help="GSSP's --groups")
    p.add_argument("--models", default="mlp", help="--model of the jobs, each paradigm with each in turn; "
                   "sim_common:linear, one linear layer: the simulator's cost with next to no model")
    p.add_argument("--profile", default="", help="paradigms to run once more under cProfile")
    p.add_argument("--name", default="simulator", help="results/<name>.json and .md")
    p.add_argument("--inner", default="", help=argparse.SUPPRESS)
    args = p.parse_args()
    paradigms = [x for x in args.paradigms.split(",") if x]
    models = [x for x in args.models.split(",") if x]
    profiled = [x for x in args.profile.split(",") if x]

    if args.inner:   # one paradigm, in this process
        paradigm = paradigms[0]
        with tempfile.TemporaryDirectory(prefix="mpips-simbench-run-") as run_dir:
            path = (os.path.join(RESULTS, f"{args.name}-profile-{paradigm}.txt") if paradigm in profiled else None)
            result = measure(config_overrides(paradigm, args.workers, args.iterations, args.groups, run_dir,
                                              models[0]), path)
        with open(args.inner, "w") as fh:
            json.dump(result, fh)
        return 0

    py_spy()
    os.makedirs(RESULTS, exist_ok=True)
    results, profiles, began = [], [], time.perf_counter()
    for paradigm in paradigms:
        for model in models:   # interleaved: the VM's speed drifts over minutes
            plain, sampled = run_one(paradigm, model, args), run_one(paradigm, model, args, sampled=True)
            modes = split(plain, sampled["samples"])
            results.append({"model": model, "plain": plain, "sampled": sampled, "us_per_iteration": modes})
            print(f"{paradigm} ({model}): {plain['total_wall_s']:.1f} s, {plain['beyond_us_per_iteration']:.0f} "
                  f"us/iteration beyond forward/backward; sampled: the simulator {modes['simulator']:.0f}, "
                  f"transfers {modes['transfers']:.0f}, the roles' bookkeeping {modes['roles']:.0f}", flush=True)
    for paradigm in profiled:
        r = run_one(paradigm, models[0], args, profile=True)
        profiles.append(r)
        print(f"{paradigm} profiled: {r['total_wall_s']:.1f} s (under cProfile)", flush=True)

    headers = ["paradigm", "model", "worker iterations", "total (s)", "set-up (s)", "run (s)", "fwd/bwd (us/it)",
               "beyond fwd/bwd (us/it)", "simulator", "transfers", "roles' bookkeeping", *PARTS[2:],
               "samples", "fwd/bwd share: sampled / timed", "switches/it", "virtual (s)", "final acc", "goals"]
    rows = []
    for r in results:
        plain, modes = r["plain"], r["us_per_iteration"]
        sim = modes["simulator"]
        ok = sim < GOAL_US and plain["total_wall_s"] < GOAL_RUN_S
        name = plain["paradigm"] + (f" (G={plain['groups']})" if plain["groups"] else "")
        rows.append([name, r["model"], plain["worker_iterations"], plain["total_wall_s"], plain["setup_wall_s"],
                     plain["run_wall_s"], 1e6 * plain["compute_wall_s"] / plain["worker_iterations"],
                     plain["beyond_us_per_iteration"], sim, modes["transfers"], modes["roles"],
                     *(modes[part] for part in PARTS[2:]), sum(r["sampled"]["samples"].values()),
                     f"{compute_share(r['sampled']):.3f} / {plain['compute_wall_s'] / plain['run_wall_s']:.3f}",
                     plain["switches_per_iteration"], plain["virtual_seconds"], plain["final_accuracy"],
                     "met" if ok else ("run > 2 min; " if plain["total_wall_s"] >= GOAL_RUN_S else "")
                     + (f"> {GOAL_US:g} us/it" if sim >= GOAL_US else "")])
    md = (f"{args.workers} workers x `--iterations {args.iterations}`, digits, `--model` "
          f"{' and '.join(models)} (mlp: the digits MLP; sim_common:linear: one linear layer), batch 16, "
          "`--evaluator`, "
          f"device time 20 ms (the simulator's default), cluster: {sim_common.DESCRIPTION}; GSSP "
          f"`--groups {args.groups}`. Each paradigm and model twice, each time in a fresh process; total "
          f"{time.perf_counter() - began:.0f} s.\n\n"
          "Per worker iteration, wall time. The first run is timed as a whole: beyond fwd/bwd = (the "
          "scheduler's run - forward/backward) / worker iterations. The second run is sampled by py-spy "
          f"({SAMPLE_RATE} stacks/s, from outside the process), each sample given to the innermost frame "
          "that says whose work it is, and the first run's time beyond fwd/bwd is split in those shares: "
          "the simulator = the scheduler and the in-process transport (the loop between tasks, task "
          "switches, sleeps, waits, control-table reads and writes, the bookkeeping of pulls and pushes); "
          "transfers = the bytes of pulls and pushes copied, which an MPI Get or Put moves too; the roles' "
          "own work, which an MPI rank does too: data (the batch's gather), server (the sum of the pushed "
          "slots and the optimizer step), log (rows, events, HDF5 flushes), evaluation; and the rest of "
          "the roles' code, their bookkeeping (views, paradigm decisions, building rows, the checks of "
          "waits), which every rank runs under MPI too. The forward/backward is both timed and sampled: its two "
          "shares of the run check the sampling. "
          f"Goals: simulator < {GOAL_US:g} us per iteration and < {GOAL_RUN_S:g} s per run.\n\n"
          + table(headers, rows) + "\n")
    if profiles:
        md += ("\nProfiled (cProfile, which slows Python calls about 2x): "
               + ", ".join(f"[{r['paradigm']}]({args.name}-profile-{r['paradigm']}.txt) "
                           f"{r['total_wall_s']:.0f} s" for r in profiles) + "\n")
    write_results(args.name, {"settings": vars(args), "cluster": sim_common.DESCRIPTION,
                              "sample_rate": SAMPLE_RATE, "results": results, "profiles": profiles}, md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
