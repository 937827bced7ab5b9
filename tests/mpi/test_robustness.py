"""Failures end the job quickly with a clear message; bad input is one line; logs survive kills."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import h5py
import pytest
from conftest import MPI_ENV, MPIEXEC, kill_job, mpiexec, train


def test_worker_exception_aborts_the_whole_job(tmp_path):
    limit = 240   # mpiexec --timeout: the net that kills a job nobody aborted
    start = time.monotonic()
    job = train(5, tmp_path / "run", "--paradigm", "bsp", "--epochs", "5000",
                "--fail-at", "2:3", check=False, timeout=limit)
    elapsed = time.monotonic() - start
    assert job.returncode != 0
    assert "injected failure (fail_at) at worker 2 iteration 3" in job.output
    assert "aborting the job" in job.output
    # 5000 epochs would take hours; the other ranks were stopped, not waited
    # for: neither their stall timeout (60 s, train()) nor mpiexec's ended it
    assert job.log.status != "finished"
    assert "stall_timeout" not in job.output, job.output[-2000:]
    assert elapsed < limit


# Every bad input's one line, exit 2 on every rank and no traceback are
# checked in one launch of many cases: tests/mpi/inproc/test_bad_input.py
# (the cases that were here, one mpiexec job of 10-20 s each, are there).
# What only a whole job shows, mpiexec's exit status 2 for `python -m mpips`
# and a job output without a traceback, is checked here on the case that
# once escaped start-up's checks: found by the workers alone, it aborted the
# job (MPI_ABORT) with a traceback.
@pytest.mark.parametrize("case", [
    ("slowdown of the wrong length", 3, ["--slowdown", "1,2,3"], "slowdown", "one factor per worker"),
], ids=lambda c: c[0])
def test_bad_input_is_one_line_naming_the_field(tmp_path, case):
    _, n, flags, field, allowed = case
    p = mpiexec(n, ["-m", "mpips", "train", "--run-dir", str(tmp_path / "run"), *flags], timeout=120)
    out = p.stdout.replace("\x00", "")
    assert p.returncode == 2, out
    errors = [line for line in out.splitlines() if line.startswith("mpips: error:")]
    assert len(errors) == 1, out
    assert field in errors[0] and allowed in errors[0], errors[0]
    assert "Traceback" not in out


ZERO_BATCH = """\
import mpips


class ZeroBatch(mpips.Paradigm):
    def batch_size(self, worker, view):
        return 0


mpips.register_paradigm("zero-batch", ZeroBatch)
"""


def test_a_paradigm_hooks_bad_count_during_the_run_is_one_line(tmp_path):
    """Found by the workers only, once they train: it aborted the job with a
    traceback of each (exit 1); now one line, exit 2, and run.h5 says why."""
    (tmp_path / "zero.py").write_text(ZERO_BATCH)
    p = mpiexec(3, ["-m", "mpips", "train", "--plugin", str(tmp_path / "zero.py"), "--paradigm", "zero-batch",
                    "--run-dir", str(tmp_path / "run"), "--epochs", "1"], timeout=120)
    out = p.stdout.replace("\x00", "")
    line = "invalid paradigm='zero-batch': its batch_size() returned 0, not an integer >= 1"
    assert p.returncode == 2, out
    assert [x for x in out.splitlines() if x.startswith("mpips: error:")] == [f"mpips: error: {line}"], out
    assert "Traceback" not in out, out
    from mpips.io.log import RunLog

    log = RunLog(str(tmp_path / "run"))
    assert log.status == "failed" and log.status_reason == line


def test_killed_run_leaves_a_readable_log(tmp_path):
    run = tmp_path / "run"
    cmd = [MPIEXEC, "-n", "3", sys.executable, "-m", "mpips", "train", "--run-dir", str(run),
           "--paradigm", "ssp", "--epochs", "400", "--log-flush-seconds", "0.5"]
    p = subprocess.Popen(cmd, env={**os.environ, **MPI_ENV}, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        rows = 0
        while time.monotonic() < deadline and rows < 200:
            time.sleep(1)
            try:
                with h5py.File(run / "rank-2.h5", "r", swmr=True) as f:
                    rows = f["iterations"].shape[0]
            except (OSError, KeyError):
                pass
        assert rows >= 200, "the run did not log iterations in time"
    finally:
        kill_job(p)
    from mpips.io.log import RunLog

    log = RunLog(str(run))
    assert log.status == "incomplete"
    it = log.iterations
    assert len(it) >= 200
    for w in (0, 1):
        its = it[it["worker"] == w]["iteration"]
        assert (its == range(len(its))).all(), "rows up to the last flush, in order, none lost"
