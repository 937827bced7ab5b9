"""What every benchmark shares: statistics, MPI launching, waiting, results files.

Benchmarks compare methods as ratios measured in the same run, with the
methods interleaved repetition by repetition, so load from other processes on
the machine hits all of them alike. Nothing here asserts a wall-clock limit.
"""
from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results")
# Run from a checkout without `make install` too: mpips is found beside benchmarks/
# (last, so PYTHONPATH can point a run at another copy of mpips to compare).
sys.path.append(os.path.dirname(HERE))
from mpips.experiments.launch import MPI_ENV, MPIEXEC  # noqa: E402,F401


def stats(seconds) -> dict:
    """Median, p99, mean and min of a sample of durations, in microseconds."""
    us = np.asarray(seconds, dtype=np.float64) * 1e6
    return {"n": int(us.size), "median_us": float(np.median(us)), "p99_us": float(np.percentile(us, 99)),
            "mean_us": float(us.mean()), "min_us": float(us.min())}


def mpiexec(n: int, args: list[str], *, timeout: float = 300, env: dict | None = None,
            cwd: str | None = None) -> str:
    """Run `mpiexec -n n python ARGS...` (in `cwd`); returns its output, raises on failure."""
    cmd = [MPIEXEC, "--timeout", str(int(timeout)), "-n", str(n), sys.executable, *args]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       errors="replace", env={**os.environ, **MPI_ENV, **(env or {})},
                       timeout=timeout + 30, cwd=cwd)
    out = p.stdout.replace("\x00", "")
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}:\n{out[-4000:]}")
    return out


def run_inner(script: str, n: int, *args: str, timeout: float = 300, env: dict | None = None) -> dict:
    """Run `script --inner OUT.json ARGS...` as an n-rank MPI job; returns what
    one rank wrote to OUT.json."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "out.json")
        mpiexec(n, [os.path.abspath(script), "--inner", path, *args], timeout=timeout, env=env)
        with open(path) as fh:
            return json.load(fh)


def quiet_barrier(comm) -> None:
    """A barrier that sleeps instead of spinning, so ranks waiting in it leave
    the (oversubscribed) cores to the ranks being measured."""
    request = comm.Ibarrier()
    while not request.Test():
        time.sleep(50e-6)


def machine() -> dict:
    """Where and under what load the numbers were taken."""
    import torch
    from mpi4py import MPI

    return {"host": platform.node(), "cpus": os.cpu_count(), "load_average": os.getloadavg(),
            "python": platform.python_version(), "torch": torch.__version__, "numpy": np.__version__,
            "mpi": MPI.Get_library_version().replace("\x00", "").splitlines()[0].strip(),
            "date": time.strftime("%Y-%m-%d %H:%M:%S")}


def table(headers: list[str], rows: list[list]) -> str:
    """A Markdown table; floats get three significant digits."""
    def cell(v):
        if isinstance(v, float):
            return f"{v:.3g}" if abs(v) < 1e4 else f"{v:.0f}"
        return "" if v is None else str(v)

    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def write_results(name: str, data: dict, markdown: str) -> None:
    """results/<name>.json (the numbers, with the machine) and results/<name>.md."""
    os.makedirs(RESULTS, exist_ok=True)
    data = {"benchmark": name, "command": " ".join([os.path.basename(sys.executable), *sys.argv]),
            "machine": machine(), **data}
    with open(os.path.join(RESULTS, f"{name}.json"), "w") as fh:
        json.dump(data, fh, indent=2)
    m = data["machine"]
    header = (f"# {name}\n\n`{data['command']}` on {m['host']} ({m['cpus']} CPUs, load average "
              f"{m['load_average'][0]:.1f} at the end), {m['date']}; {m['mpi']}, torch {m['torch']}.\n\n")
    with open(os.path.join(RESULTS, f"{name}.md"), "w") as fh:
        fh.write(header + markdown.rstrip() + "\n")
    print(header + markdown)
