"""A rank stopped mid-run (SIGSTOP: a node swapping, a debugger, a cgroup
freeze) loses no trained work: the end of the run names it within the stall
timeout, and server 0 has saved the final parameters and the status."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np

from conftest import MPI_ENV, MPIEXEC
from mpips.io.log import RunLog


def _rank_pid(rank: int, launcher: int) -> int | None:
    """The pid of MPI rank `rank` of the job whose launcher is `launcher`: a
    child of it (or of its child) whose environment says that rank."""
    def parent(pid):
        with open(f"/proc/{pid}/stat") as fh:
            return int(fh.read().rsplit(")", 1)[1].split()[1])
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if launcher not in (parent(pid), parent(parent(pid))):
                continue
            with open(f"/proc/{pid}/environ", "rb") as fh:
                env = dict(item.split(b"=", 1) for item in fh.read().split(b"\0") if b"=" in item)
        except (OSError, ValueError, IndexError):
            continue
        if env.get(b"OMPI_COMM_WORLD_RANK", env.get(b"PMI_RANK")) == str(rank).encode():
            return int(pid)
    return None


def test_a_stopped_evaluator_is_named_and_the_training_kept(tmp_path):
    run = tmp_path / "run"
    cmd = [MPIEXEC, "--timeout", "200", "-n", "4", sys.executable, "-m", "mpips", "train", "--paradigm", "bsp",
           "--epochs", "10", "--device-time", "10ms", "--evaluator", "--eval-every", "0.5", "--run-dir", str(run),
           "--stall-timeout", "10", "--stall-warn", "2"]
    job = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           env={**os.environ, **MPI_ENV})
    stopped = None
    try:
        deadline = time.monotonic() + 60
        while stopped is None and time.monotonic() < deadline:
            time.sleep(0.2)
            if (run / "rank-3.h5").exists():   # training: the evaluator (rank 3) has its log open
                stopped = _rank_pid(3, job.pid)
        assert stopped is not None, "the evaluator rank was not found"
        os.kill(stopped, signal.SIGSTOP)
        began = time.monotonic()
        out = job.communicate(timeout=150)[0].replace("\x00", "")
        took = time.monotonic() - began
    finally:
        job.kill()
        if stopped is not None:
            try:
                os.kill(stopped, signal.SIGKILL)
            except ProcessLookupError:
                pass
    assert job.returncode == 1, out
    assert "the end of the run: rank(s) 3 (evaluator 0) did not arrive within 10s" in out, out
    assert took < 90, (took, out)
    log = RunLog(str(run))
    assert log.status == "finished" and "3 (evaluator 0) did not finish" in log.status_reason
    params = log.final_params()
    assert params is not None and np.isfinite(params).all()
    assert log.completeness()["complete"], log.completeness()
