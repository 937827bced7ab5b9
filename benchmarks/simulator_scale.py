"""The simulator at 256 and 1,024 workers against a plain loop (issue #51):
worker iterations a second of `mpips simulate` (cnn1d on MNIST-1D, batch 32,
ASP, sim_common's cluster mix) beside a plain PyTorch loop's forward/backward
iterations a second at the same batch.

    python benchmarks/simulator_scale.py                       # exact and batched gradients
    python benchmarks/simulator_scale.py --before DIR          # also a checkout before a change

Each job runs in a fresh process, timed from inside: the scheduler's run
alone (Scheduler.run: set-up, the rank logs' files and their closing left
out), the gradients in it (the per-worker forward/backward, or the batched
calls) and the rest of the run per worker iteration: the roles, the
scheduler and the in-process transport (results/hotpath_profile.md splits
that rest by function). The plain loop (this checkout's model and data, one
thread) runs in a fresh process before each worker count's jobs and after
them. Goal: the simulator at 1,024 workers >= 2x the plain loop's rate.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import sim_common  # noqa: E402
from common import table, write_results  # noqa: E402

GOAL = 2.0
BATCH = 32


def plain_rate(seconds: float = 5.0) -> float:
    """Forward/backward iterations a second of cnn1d on MNIST-1D at BATCH, in this process."""
    import torch

    from mpips.config import Config
    from mpips.training.data import load_dataset
    from mpips.training.models import build_model

    torch.set_num_threads(1)
    data = load_dataset(Config(dataset="mnist1d", model="cnn1d", batch_size=BATCH))
    torch.manual_seed(0)
    model = build_model("cnn1d", data.input_shape, data.num_classes)
    loss_fn = torch.nn.CrossEntropyLoss()
    x, y = data.x_train[:BATCH], data.y_train[:BATCH]
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds or n < 20:
        model.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        float(loss.detach())
        n += 1
    return n / (time.perf_counter() - t0)


def _import(*names):
    """The first module of `names` that imports (this checkout's layout, or an older one's)."""
    import importlib
    for name in names:
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    raise ImportError(names)


def measure(workers: int, iterations: int, gradients: str, run_dir: str) -> dict:
    """One simulated job in this process, its run timed (the module doc)."""
    from mpips.config import load
    scheduler = _import("mpips.runtime.transport.scheduler", "mpips.runtime.scheduler")
    simulate = _import("mpips.runtime.job.simulate", "mpips.runtime.simulate")
    worker = _import("mpips.runtime.roles.worker", "mpips.runtime.worker")
    acc = {"run": 0.0, "gradients": 0.0, "iterations": 0}

    def timed(cls, name, count):
        method = getattr(cls, name)

        def wrapper(self, *args):
            t = time.perf_counter()
            try:
                return method(self, *args)
            finally:
                acc["gradients"] += time.perf_counter() - t
                acc["iterations"] += count(self, *args)
        setattr(cls, name, wrapper)

    timed(worker.Worker, "compute_gradient", lambda self, x, y: 1)
    try:
        batched = _import("mpips.training.batched")
        timed(batched.BatchedGradients, "compute",
              lambda self, first: 0)   # counted below, from the log
    except ImportError:
        pass
    run = scheduler.Scheduler.run

    def timed_run(self):
        t = time.perf_counter()
        try:
            return run(self)
        finally:
            acc["run"] += time.perf_counter() - t
    scheduler.Scheduler.run = timed_run
    overrides = {"paradigm": "asp", "workers": workers, "iterations": iterations, "model": "cnn1d",
                 "dataset": "mnist1d", "batch_size": BATCH, "eval_every": 1000.0, "run_dir": run_dir,
                 **sim_common.options(workers)}
    if gradients:
        overrides["sim_gradients"] = gradients
    t0 = time.perf_counter()
    simulate.simulate(load(None, overrides))
    total = time.perf_counter() - t0
    from mpips.io.log import RunLog
    worker_iterations = len(RunLog(run_dir).iterations)
    return {"workers": workers, "gradients": gradients or "per-worker", "total_s": total, "run_s": acc["run"],
            "gradients_s": acc["gradients"], "worker_iterations": worker_iterations,
            "rate": worker_iterations / acc["run"],
            "rest_us": 1e6 * (acc["run"] - acc["gradients"]) / worker_iterations,
            "gradients_us": 1e6 * acc["gradients"] / worker_iterations}


def inner(args, code: str, *extra: str) -> dict:
    """This script's --inner mode in a fresh process (`code`: a checkout to run instead)."""
    with tempfile.TemporaryDirectory(prefix="mpips-simscale-") as tmp:
        out = os.path.join(tmp, "out.json")
        cmd = [sys.executable, os.path.abspath(__file__), "--inner", out, *extra]
        env = {**os.environ, "PYTHONPATH": code or os.path.dirname(HERE)}
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                           cwd=code or None)
        if p.returncode:
            raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}:\n{p.stdout[-3000:]}")
        with open(out) as fh:
            return json.load(fh)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workers", default="256,1024")
    p.add_argument("--iterations", type=int, default=6, help="per worker, on average")
    p.add_argument("--before", default="", metavar="DIR", help="a checkout of mpips before a change")
    p.add_argument("--name", default="simulator-scale")
    p.add_argument("--inner", default="", help=argparse.SUPPRESS)
    p.add_argument("--job", default="", help=argparse.SUPPRESS)   # workers:gradients, or plain
    args = p.parse_args()
    if args.inner:
        if args.job == "plain":
            result = {"rate": plain_rate()}
        else:
            workers, gradients = args.job.split(":")
            with tempfile.TemporaryDirectory(prefix="mpips-simscale-run-") as run_dir:
                result = measure(int(workers), args.iterations, gradients, os.path.join(run_dir, "run"))
        with open(args.inner, "w") as fh:
            json.dump(result, fh)
        return 0
    variants = ([("before", os.path.abspath(args.before), "")] if args.before else []) + [
        ("per-worker (exact)", "", "exact"), ("batched", "", "batched")]
    results, began = [], time.perf_counter()
    for w in (int(x) for x in args.workers.split(",")):
        plain = [inner(args, "", "--job", "plain")["rate"]]
        for label, code, gradients in variants:
            r = inner(args, code, "--job", f"{w}:{gradients}", "--iterations", str(args.iterations))
            r["variant"] = label
            results.append(r)
            print(f"{w} workers, {label}: {r['rate']:.0f} worker iterations/s", flush=True)
        plain.append(inner(args, "", "--job", "plain")["rate"])
        for r in results:
            if r["workers"] == w:
                r["plain_rate"] = sum(plain) / len(plain)
                r["plain_rates"] = plain
    rows = [[r["workers"], r["variant"], r["worker_iterations"], r["total_s"], r["run_s"], r["rate"],
             r["plain_rate"], r["rate"] / r["plain_rate"], r["gradients_us"], r["rest_us"]] for r in results]
    top = [r for r in results if r["workers"] == max(x["workers"] for x in results) and r["variant"] == "batched"]
    verdict = ""
    if top:
        ratio = top[0]["rate"] / top[0]["plain_rate"]
        verdict = (f"\n\nGoal: at {top[0]['workers']} workers, batched, >= {GOAL:g}x the plain loop: "
                   f"**{ratio:.2f}x**, " + ("met" if ratio >= GOAL else "not met") + ".\n")
    md = (f"`mpips simulate --paradigm asp --model cnn1d --dataset mnist1d --batch-size {BATCH} "
          f"--iterations {args.iterations}` with sim_common's cluster mix ({sim_common.DESCRIPTION}), each "
          "job in a fresh process; its run timed from inside (Scheduler.run: the set-up and the rank "
          "logs' files left out). plain: forward/backward iterations a second of the same model at the same "
          "batch in one process (one thread), before and after each worker count's jobs (mean). rest: the "
          f"run beyond the gradients, per worker iteration. Total {time.perf_counter() - began:.0f} s.\n\n"
          + table(["workers", "gradients", "worker iterations", "job (s)", "run (s)", "worker it/s",
                   "plain it/s", "ratio", "gradients (us/it)", "rest (us/it)"], rows) + verdict)
    write_results(args.name, {"settings": vars(args), "results": results}, md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
