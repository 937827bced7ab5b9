"""GSSP checkpoints under mpiexec: group servers relay the request down to
their groups and save their own state; a group that finished still takes
part. A job preempted (SIGUSR1 to mpiexec, as jobs/common.sh forwards it)
after such a checkpoint exits 3, is started again with the same run
directory, resumes and finishes as well as a run never interrupted."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from conftest import MPI_ENV, MPIEXEC, train

from mpips.io.checkpoint import CheckpointError, checkpoint_files, read_checkpoint
from mpips.runtime.recovery.checkpointer import PREEMPTED_EXIT
from tests.thresholds import SETUPS

RANKS = 5   # 1 server + 2 group servers + 2 workers: each worker its own group
# worker 1 is 8x slower: group 0 finishes long before group 1. GDTopK: the
# group servers' compressor residuals are part of what a checkpoint keeps.
FLAGS = SETUPS["gssp-checkpoint"].flags


def _one_group_done(run_dir) -> dict | None:
    """The newest checkpoint's meta if it was taken with worker 0 (group 0)
    done and worker 1 not."""
    files = checkpoint_files(str(run_dir))
    if not files:
        return None
    try:
        meta, _ = read_checkpoint(files[-1])
    except CheckpointError:
        return None   # pruned while we read it
    n = meta["identity"]["iterations"]
    return meta if meta["clocks"][0] == n > meta["clocks"][1] else None


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    base = tmp_path_factory.mktemp("gssp_checkpoint")
    reference = train(RANKS, base / "reference", *FLAGS)
    run = base / "run"
    cmd = [MPIEXEC, "-n", str(RANKS), sys.executable, "-m", "mpips", "train", "--run-dir", str(run),
           "--stall-timeout", "60", *FLAGS]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         errors="replace", env={**os.environ, **MPI_ENV})
    try:
        deadline = time.monotonic() + 180
        while (done_meta := _one_group_done(run)) is None:
            assert p.poll() is None, f"job ended ({p.returncode}) before group 0 was done"
            assert time.monotonic() < deadline, "no checkpoint with group 0 done"
            time.sleep(0.02)
        p.send_signal(signal.SIGUSR1)
        out, _ = p.communicate(timeout=180)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    first = (p.returncode, out.replace("\x00", ""))
    resumed = train(RANKS, run, *FLAGS)
    return reference, done_meta, first, resumed


def test_preempted_gssp_job_checkpoints_and_exits_to_be_requeued(jobs):
    _, _, (code, out), _ = jobs
    assert code == PREEMPTED_EXIT, out[-3000:]
    assert "(preemption)" in out and f"exiting with status {PREEMPTED_EXIT}" in out, out[-3000:]


def test_a_checkpoint_taken_after_a_group_finished_holds_every_rank(jobs):
    _, meta, _, _ = jobs
    assert meta["grouping"]["groups"] == [[0], [1]]
    # by world rank: the global server, then the two group servers
    assert len(meta["server_steps"]) == 3 and meta["server_steps"][1] > 0


def test_resumed_gssp_job_goes_on_from_the_cut(jobs):
    _, _, _, job = jobs
    assert "resuming from" in job.output, job.output[-3000:]
    log = job.log
    assert log.status == "finished" and log.segments == 2
    [preemption] = [c for c in log.events("checkpoint") if c["reason"] == "preemption"]
    cut = log.events("segment")[-1]
    assert cut["resumed_from"] == preemption["path"] and cut["clocks"] == preemption["clocks"]
    # the groups came from the checkpoint, not from profiling again
    assert [g["source"] for g in log.events("groups")][-1] == "checkpoint"
    # every iteration of every worker once; nothing redone after a preemption's cut
    n = log.layout["iterations_per_worker"]
    it = log.iterations
    assert log.redone["iterations"] == 0
    for w in range(2):
        assert np.sort(it["iteration"][it["worker"] == w]).tolist() == list(range(n))
    # each group server's exchanges go on numbered from where they stopped,
    # and forward every push of its group once across the two segments
    ex = log.exchanges
    for g in (0, 1):
        rows = np.sort(ex[ex["group"] == g], order="exchange")
        assert rows["exchange"].tolist() == list(range(1, len(rows) + 1))
        assert rows["pushes"].sum() == rows["forwarded"][-1] == n
    steps = np.sort(log.applies["step"][log.applies["server"] == 0])
    assert steps.tolist() == list(range(1, steps[-1] + 1))


def test_resumed_gssp_job_is_as_good_as_an_uninterrupted_one(jobs):
    reference, _, _, job = jobs
    final, ref_final = job.log.summary()["final_accuracy"], reference.log.summary()["final_accuracy"]
    print(f"final accuracy {final:.4f} (uninterrupted {ref_final:.4f})")
    # two runs of this set-up differ by this much from timing and rounding alone (tests/thresholds.py)
    assert abs(final - ref_final) <= SETUPS["gssp-checkpoint"].spread, (final, ref_final)
