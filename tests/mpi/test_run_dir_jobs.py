"""A run directory belongs to one run, under MPI: a used one is refused (one
line, exit 2) unless --overwrite; a second job on a directory in use stops
at set-up naming the first, which finishes untouched."""
from __future__ import annotations

import os
import subprocess
import sys
import time

from conftest import MPI_ENV, MPIEXEC, train


def test_a_used_run_directory_is_refused_then_overwritten(tmp_path):
    run = tmp_path / "run"
    train(5, run, "--paradigm", "bsp", "--epochs", "1")
    refused = train(3, run, "--paradigm", "bsp", "--epochs", "1", check=False)
    assert refused.returncode == 2, refused.output
    errors = [line for line in refused.output.splitlines() if line.startswith("mpips: error:")]
    assert len(errors) == 1 and "holds a bsp run, finished" in errors[0] and "--overwrite" in errors[0], refused.output
    assert refused.log.layout["workers"] == 4
    log = train(3, run, "--paradigm", "bsp", "--epochs", "1", "--overwrite").log
    assert sorted(p.name for p in run.glob("rank-*.h5")) == ["rank-0.h5", "rank-1.h5", "rank-2.h5"]
    s = log.summary()
    assert s["complete"] and s["workers"] == 2 and s["samples"] == log.layout["total_samples"]


def test_a_second_job_on_a_directory_in_use_is_refused(tmp_path):
    run = tmp_path / "run"
    cmd = [MPIEXEC, "--timeout", "200", "-n", "3", sys.executable, "-m", "mpips", "train", "--paradigm", "bsp",
           "--epochs", "15", "--device-time", "20ms", "--run-dir", str(run), "--stall-timeout", "60"]
    first = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             env={**os.environ, **MPI_ENV})
    try:
        deadline = time.monotonic() + 120
        while not (run / "run.h5").exists() and time.monotonic() < deadline:   # the first job is training
            time.sleep(0.2)
        second = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env={**os.environ, **MPI_ENV}, timeout=200)
        assert first.poll() is None, "the first job ended before the second was refused: make it longer"
        out = first.communicate(timeout=200)[0]
    finally:
        first.kill()
    assert second.returncode == 2, second.stdout
    assert "in use by the job started" in second.stdout and f"pid {first.pid}" not in second.stdout, second.stdout
    assert first.returncode == 0, out
    from mpips.io.log import RunLog

    assert RunLog(str(run)).completeness()["complete"]
