"""Where the hot path's time goes (issue #51): py-spy's samples of an MPI job's
ranks and of the simulator, as tables of the top functions.

    python benchmarks/hotpath_profile.py --name hotpath_profile-before
    python benchmarks/hotpath_profile.py --only sim --workers 1024

Needs py-spy (`pip install py-spy`). Three jobs, each sampled from outside
the process (nothing inside is wrapped):

- mpi: `mpips train --paradigm bsp --model lenet5 --batch-size 16
  --iterations 400`, 1 server + 1 worker (the set-up of overhead.py),
  each rank sampled at RATE stacks a second, sleeping excluded (py-spy's
  default: a rank waiting in `time.sleep` is not working);
- sim-256 and sim-1024: `mpips simulate` of cnn1d on MNIST-1D, batch 32,
  ASP, with the shared-cluster mix of sim_common.py (benchmarks/simulator.py
  --workload mnist1d's job).

For each: the share of the samples whose innermost frame is a function
(self), and of those with the function anywhere on the stack (total), the
top TOP of each, only the samples after the run's start (frames of the
role bodies: the set-up is left out). Results: results/<name>.md and .json.
"""
from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import sim_common  # noqa: E402
from common import MPI_ENV, MPIEXEC, table, write_results  # noqa: E402

RATE = 1000
TOP = 25
_FRAME = re.compile(r"(.*) \((.*):(\d+)\)$")
# a sample belongs to the run once one of these is on its stack (set-up excluded)
RUN_FRAMES = ("Worker.run", "Server.run", "Scheduler.run")


def py_spy() -> str:
    found = shutil.which("py-spy") or shutil.which("py-spy", path=os.path.dirname(sys.executable))
    if not found:
        raise SystemExit("benchmarks/hotpath_profile.py samples with py-spy: pip install py-spy")
    return found


def _short(path: str) -> str:
    for mark in ("/mpips/", "/site-packages/", "/lib/python"):
        if mark in path:
            return path[path.index(mark) + 1:]
    return os.path.basename(path)


def tables(raw: str) -> dict:
    """self and total shares per function of the run's samples in a py-spy raw file."""
    own, total, n = collections.Counter(), collections.Counter(), 0
    with open(raw) as fh:
        for line in fh:
            stack, count = line.rstrip().rsplit(" ", 1)
            frames = [m.groups() for m in map(_FRAME.match, stack.split(";")) if m]
            if not any(f in RUN_FRAMES for f, _, _ in frames):
                continue
            k = int(count)
            n += k
            names = [f"{f} ({_short(p)})" for f, p, _ in frames]
            if names:
                own[names[-1]] += k
            for name in set(names):
                total[name] += k
    return {"samples": n,
            "self": [[name, c / n] for name, c in own.most_common(TOP)] if n else [],
            "total": [[name, c / n] for name, c in total.most_common(TOP)] if n else []}


def mpi_job(tmp: str, iterations: int) -> dict:
    """Each rank of the 1 + 1 BSP job under its own py-spy."""
    wrapper = os.path.join(tmp, "spy.sh")
    with open(wrapper, "w") as fh:
        fh.write(f'#!/bin/sh\nexec {py_spy()} record --rate {RATE} --format raw --nonblocking '
                 f'--output {tmp}/rank-$OMPI_COMM_WORLD_RANK.txt -- "$@"\n')
    os.chmod(wrapper, 0o755)
    cmd = [MPIEXEC, "--timeout", "300", "-n", "2", wrapper, sys.executable, "-m", "mpips", "train",
           "--paradigm", "bsp", "--model", "lenet5", "--batch-size", "16", "--iterations", str(iterations),
           "--eval-every", "1000", "--run-dir", os.path.join(tmp, "run")]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       env={**os.environ, **MPI_ENV})
    if p.returncode:
        raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}:\n{p.stdout[-3000:]}")
    return {"server (rank 0)": tables(f"{tmp}/rank-0.txt"), "worker (rank 1)": tables(f"{tmp}/rank-1.txt")}


def sim_job(tmp: str, workers: int, iterations: int, extra: list[str]) -> dict:
    raw = os.path.join(tmp, f"sim-{workers}.txt")
    mix = sim_common.options(workers)
    cmd = [py_spy(), "record", "--rate", str(RATE), "--format", "raw", "--nonblocking", "--output", raw, "--",
           sys.executable, "-m", "mpips", "simulate", "--paradigm", "asp", "--workers", str(workers),
           "--model", "cnn1d", "--dataset", "mnist1d", "--batch-size", "32", "--iterations", str(iterations),
           "--slowdown", mix["slowdown"], "--random-stragglers", mix["random_stragglers"],
           "--eval-every", "1000", "--run-dir", os.path.join(tmp, f"sim-{workers}"), *extra]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode:
        raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}:\n{p.stdout[-3000:]}")
    return {f"simulator, {workers} workers": tables(raw)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--name", default="hotpath_profile")
    p.add_argument("--only", default="mpi,sim", help="mpi, sim or both")
    p.add_argument("--workers", default="256,1024", help="the simulator's worker counts")
    p.add_argument("--sim-iterations", type=int, default=10, help="per worker, on average")
    p.add_argument("--sim-args", default="", help="more `mpips simulate` options (e.g. --sim-batch off)")
    args = p.parse_args()
    found = {}
    with tempfile.TemporaryDirectory(prefix="mpips-hotpath-") as tmp:
        if "mpi" in args.only:
            found.update(mpi_job(tmp, 400))
        if "sim" in args.only:
            for w in (int(x) for x in args.workers.split(",")):
                found.update(sim_job(tmp, w, args.sim_iterations, args.sim_args.split()))
    md = [f"py-spy at {RATE} stacks/s from outside each process, samples of the run only (set-up left out); "
          "sleeping left out (py-spy's default). mpi: `mpips train --paradigm bsp --model lenet5 --batch-size 16 "
          "--iterations 400`, 1 server + 1 worker; simulator: `mpips simulate --paradigm asp --model cnn1d "
          f"--dataset mnist1d --batch-size 32 --iterations {args.sim_iterations}` with sim_common's cluster mix"
          + (f" and `{args.sim_args}`" if args.sim_args else "")
          + f". Top {TOP} functions: self (the innermost frame) and total (anywhere on the stack), as shares "
          "of the run's samples.\n"]
    for job, t in found.items():
        md.append(f"\n## {job} ({t['samples']} samples)\n")
        rows = [[k + 1, *(t["self"][k] if k < len(t["self"]) else ["", None]),
                 *(t["total"][k] if k < len(t["total"]) else ["", None])] for k in range(TOP)]
        md.append(table(["#", "self: function", "share", "total: function", "share"], rows))
    write_results(args.name, {"rate": RATE, "profiles": found}, "\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
