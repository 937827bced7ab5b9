"""Launch real MPI jobs of `python -m mpips train` and read their logs.

Tests here run in a plain pytest process and start `mpiexec -n N` in a
subprocess, so a whole job (roles, windows, logs, exit codes) is exercised
exactly as a user runs it. `mpiexec --timeout` is a second net under
pytest-timeout: a hang ends as a failure, never as a stuck CI.
"""
from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass

import pytest

from mpips.log import RunLog

from mpips.launch import MPI_ENV, MPIEXEC  # noqa: E402,F401


@dataclass
class Job:
    returncode: int
    output: str
    run_dir: str

    @property
    def log(self) -> RunLog:
        return RunLog(self.run_dir)


def mpiexec(n: int, args: list[str], *, timeout: float = 240, env: dict | None = None):
    """Run `mpiexec -n n python ARGS...`; returns the CompletedProcess (stdout+stderr)."""
    cmd = [MPIEXEC, "--timeout", str(int(timeout)), "-n", str(n), sys.executable, *args]
    full_env = {**os.environ, **MPI_ENV, **(env or {})}
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=full_env,
                          timeout=timeout + 30, text=True, errors="replace")


def train(n: int, run_dir, *flags: str, timeout: float = 240, check: bool = True) -> Job:
    """One training job of n ranks writing to run_dir; fails the test on a
    non-zero exit (with the job's output) when `check`."""
    p = mpiexec(n, ["-m", "mpips", "train", "--run-dir", str(run_dir), "--stall-timeout", "60",
                    *flags], timeout=timeout)
    out = p.stdout.replace("\x00", "")
    if check and p.returncode != 0:
        pytest.fail(f"job exited {p.returncode}:\n{out[-4000:]}")
    return Job(p.returncode, out, str(run_dir))


@pytest.fixture
def run_dir(tmp_path):
    return tmp_path / "run"
