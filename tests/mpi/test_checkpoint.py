"""Resume outside Slurm: a job killed (SIGKILL) after a periodic checkpoint
is started again with the same run directory and goes on from the checkpoint;
a corrupt checkpoint stops the job with one line naming it (an incompatible
one takes the same path: tests/unit/test_checkpoint_files.py); SIGUSR1 to
mpiexec checkpoints and exits 3, and Sync-Switch's mode survives it."""
from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import h5py
import numpy as np
import psutil
import pytest

from conftest import MPI_ENV, MPIEXEC, train

from mpips.checkpoint import checkpoint_files
from mpips.log import RunLog

RANKS = 4   # 1 server, 3 workers
FLAGS = ("--paradigm", "ssp", "--staleness", "2", "--epochs", "12", "--checkpoint-every", "1",
         "--log-flush-seconds", "0.2")


def _kill_after_a_checkpoint(run_dir, timeout=120) -> None:
    """Start the job; once a checkpoint exists and training went on a little,
    SIGKILL mpiexec and every rank (a node lost, no chance to clean up)."""
    cmd = [MPIEXEC, "-n", str(RANKS), sys.executable, "-m", "mpips", "train",
           "--run-dir", str(run_dir), "--stall-timeout", "60", *FLAGS]
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         env={**os.environ, **MPI_ENV})
    try:
        deadline = time.monotonic() + timeout
        while not checkpoint_files(str(run_dir)):
            assert p.poll() is None, f"job ended ({p.returncode}) before its first checkpoint"
            assert time.monotonic() < deadline, "no checkpoint written"
            time.sleep(0.05)
        time.sleep(0.6)   # work on, some of it flushed to the log: lost on resume
    finally:
        try:
            procs = [psutil.Process(p.pid)]
            procs += procs[0].children(recursive=True)
        except psutil.NoSuchProcess:
            procs = []
        for proc in procs:
            try:
                proc.kill()
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(procs, timeout=30)
        p.wait()
    assert RunLog(str(run_dir)).status != "finished", "the job finished before the kill"


@pytest.fixture(scope="module")
def resumed(tmp_path_factory):
    """The killed run, a copy of it as it was, and the job that resumed it."""
    base = tmp_path_factory.mktemp("checkpoint")
    run = base / "run"
    _kill_after_a_checkpoint(run)
    copy = base / "copy"
    shutil.copytree(run, copy)
    job = train(RANKS, run, *FLAGS)
    return run, copy, job


def _segment_rows(run_dir, segment: int) -> np.ndarray:
    """The iterations rows the rank files of one segment hold, all of them."""
    rows = []
    for path in glob.glob(os.path.join(run_dir, "rank-*.h5")):
        with h5py.File(path, "r", swmr=True) as f:   # a killed writer leaves it flagged open
            if int(f.attrs.get("segment", 0)) == segment and len(f["iterations"]):
                rows.append(f["iterations"][...])
    return np.concatenate(rows)


def test_a_killed_job_resumes_from_its_checkpoint_and_finishes(resumed):
    run, copy, job = resumed
    newest = checkpoint_files(str(copy))[-1]
    assert f"resuming from {run}/checkpoints/{os.path.basename(newest)}" in job.output, job.output
    log = job.log
    assert log.status == "finished" and log.segments == 2
    cut = log.events("segment")[-1]
    assert cut["segment"] == 1 and cut["resumed_from"].endswith(os.path.basename(newest))
    n = log.layout["iterations_per_worker"]
    # numbering continues from the checkpoint: segment 1 starts at the cut's clocks
    rows = _segment_rows(run, 1)
    for w, clock in enumerate(cut["clocks"]):
        mine = np.sort(rows["iteration"][rows["worker"] == w])
        assert mine.tolist() == list(range(clock, n)), (w, clock)
    # and the run's log holds every iteration once, work lost after the cut left out
    it = log.iterations
    for w in range(3):
        assert np.sort(it["iteration"][it["worker"] == w]).tolist() == list(range(n))
        assert np.sort(it["clock"][it["worker"] == w]).tolist() == list(range(n))
    steps = np.sort(log.applies["step"][log.applies["server"] == 0])
    assert steps.tolist() == list(range(1, steps[-1] + 1))
    assert steps[0] == 1 and cut["step"] < steps[-1]
    assert log.summary()["final_accuracy"] is not None


def test_work_lost_after_the_checkpoint_is_left_out(resumed):
    run, _, job = resumed
    cut = job.log.events("segment")[-1]
    rows = _segment_rows(run, 0)
    lost = rows["iteration"] >= np.asarray(cut["clocks"])[rows["worker"]]
    # how much was lost depends on when the kill landed (possibly nothing)
    assert job.log.redone["iterations"] == int(lost.sum())
    print(f"iterations lost after the checkpoint and redone: {int(lost.sum())}")


def _error_line(job) -> str:
    lines = [line for line in job.output.splitlines() if line.startswith("mpips: error:")]
    assert len(lines) == 1, job.output
    return lines[0]


def test_a_corrupt_checkpoint_stops_the_job_naming_the_file(resumed, tmp_path):
    copy = shutil.copytree(resumed[1], tmp_path / "run")
    newest = checkpoint_files(str(copy))[-1]
    with h5py.File(newest, "r") as f:   # flip bytes inside server 0's parameter shard
        shard = json.loads(f["rank-0/state"][()].tobytes())["role"]["shard"]["__array__"]
        offset = f[f"rank-0/{shard}"].id.get_offset()
    with open(newest, "r+b") as fh:
        fh.seek(offset + 64)
        b = fh.read(8)
        fh.seek(offset + 64)
        fh.write(bytes(x ^ 0xFF for x in b))
    job = train(RANKS, copy, *FLAGS, check=False)
    assert job.returncode == 2, job.output
    line = _error_line(job)
    assert line.startswith(f"mpips: error: checkpoint {newest}: corrupt"), line


def _preempt(run_dir, flags, after: str, timeout=180) -> tuple[int, str]:
    """Start the job and send mpiexec SIGUSR1 (as jobs/common.sh passes on
    Slurm's) once `after` is in its output; its exit status and output."""
    cmd = [MPIEXEC, "--timeout", str(timeout), "-n", str(RANKS), sys.executable, "-m", "mpips",
           "train", "--run-dir", str(run_dir), "--stall-timeout", "60", *flags]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         errors="replace", env={**os.environ, **MPI_ENV})
    out = []
    for line in p.stdout:
        out.append(line)
        if after and after in line:
            p.send_signal(signal.SIGUSR1)
            after = None
    return p.wait(), "".join(out).replace("\0", "")


def test_syncswitch_mode_survives_preemption(tmp_path):
    run = tmp_path / "run"
    flags = ("--paradigm", "syncswitch", "--switch-at", "0.05", "--epochs", "10", "--slowdown", "1,1,2")
    status, out = _preempt(run, flags, after="mpips: epoch  2.")   # switched to ASP by then
    assert status == 3 and "checkpoint 1 (preemption)" in out, out
    log = train(RANKS, run, *flags).log
    [checkpoint] = log.events("checkpoint")
    [switch] = log.events("switch")   # one switch, not again after the resume
    assert switch["to"] == "asp" and switch["clock"] <= min(checkpoint["clocks"])
    n = log.layout["iterations_per_worker"]
    assert log.redone["iterations"] == 0
    for w in range(3):
        assert np.sort(log.iterations["iteration"][log.iterations["worker"] == w]).tolist() == list(range(n))
