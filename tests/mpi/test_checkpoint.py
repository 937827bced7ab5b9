"""Resume outside Slurm: a job killed (SIGKILL) after a periodic checkpoint
is started again with the same run directory and goes on from the checkpoint,
Sync-Switch's mode included; a corrupt checkpoint stops the job with one line
naming it (an incompatible one takes the same path:
tests/unit/test_checkpoint_files.py). SIGUSR1: tests/slurm and
tests/mpi/inproc/test_checkpointer.py."""
from __future__ import annotations

import glob
import json
import os
import shutil

import h5py
import numpy as np
import pytest
from conftest import assert_each_sample_once, kill_training_when, train

from mpips.io.checkpoint import CheckpointError, checkpoint_files, decode, read_checkpoint
from mpips.paradigms.view import MODE_ASP, SLOT_MODE

RANKS = 5   # 1 server, 3 workers, the evaluator (which takes part in every checkpoint)
# BSP for the first 2% of the samples, then ASP: the checkpoint must keep the mode
# 40 epochs: long enough that even an idle machine cannot finish before the kill lands
# dc-adaptive: a checkpoint keeps its MS and the parameters each pending push was read at
FLAGS = ("--paradigm", "syncswitch", "--switch-at", "0.02", "--epochs", "40", "--slowdown", "1,1,2",
         "--checkpoint-every", "0.5", "--log-flush-seconds", "0.2", "--evaluator", "--async-rule", "dc-adaptive")


def _checkpoint_in_asp(run_dir) -> bool:
    """The newest checkpoint was taken after the switch to ASP (server 0 holds the table)."""
    files = checkpoint_files(str(run_dir))
    try:
        _, ranks = read_checkpoint(files[-1]) if files else (None, None)
    except CheckpointError:
        return False   # pruned while we read it
    return bool(ranks) and decode(*ranks[0])["control"][SLOT_MODE] == MODE_ASP


def _newest_clocks(run_dir):
    """The worker clocks of the newest checkpoint (None while there is none)."""
    files = checkpoint_files(str(run_dir))
    try:
        return read_checkpoint(files[-1])[0]["clocks"] if files else None
    except CheckpointError:
        return None   # pruned while we read it


def _logged_beyond(run_dir, clocks) -> int:
    """Iterations the rank files hold (flushed) at or past `clocks`."""
    try:
        rows = _segment_rows(run_dir, 0)
    except (OSError, KeyError, ValueError):
        return 0   # a file being created, or nothing flushed yet
    return int((rows["iteration"] >= np.asarray(clocks)[rows["worker"]]).sum())


def _kill_after_a_checkpoint(run_dir) -> bool:
    """Kill the job once a checkpoint was taken in ASP mode and the log holds
    work done after the newest checkpoint. True if no checkpoint landed
    between that look and the kill, so that the resumed job has work to
    leave out."""
    seen = []

    def ready():
        seen[:] = [_newest_clocks(run_dir)]
        return seen[0] is not None and _checkpoint_in_asp(run_dir) and bool(_logged_beyond(run_dir, seen[0]))
    kill_training_when(RANKS, run_dir, FLAGS, ready, "checkpoint in ASP mode with work logged after it")
    return _newest_clocks(run_dir) == seen[0]


@pytest.fixture(scope="module")
def resumed(tmp_path_factory):
    """The killed run, a copy of it as it was, and the job that resumed it."""
    base = tmp_path_factory.mktemp("checkpoint")
    for attempt in range(3):
        # a checkpoint every 0.5 s may land between the look at the log and the
        # kill; then the cut has nothing after it: kill a fresh run instead
        run = base / f"run{attempt}"
        if _kill_after_a_checkpoint(run):
            break
    else:
        pytest.fail("three kills in a row landed just after a checkpoint")
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
    # numbering continues from the checkpoint: segment 1 starts at the cut's clocks
    # (under the global budget each worker does as many iterations as its speed allows)
    rows = _segment_rows(run, 1)
    for w, clock in enumerate(cut["clocks"]):
        mine = np.sort(rows["iteration"][rows["worker"] == w])
        assert mine.tolist() == list(range(clock, clock + len(mine))), (w, clock)
    # and the run's log holds every iteration once, work lost after the cut left out
    it = log.iterations
    for w in range(3):
        n = int((it["worker"] == w).sum())
        assert n > 0
        assert np.sort(it["iteration"][it["worker"] == w]).tolist() == list(range(n))
        assert np.sort(it["clock"][it["worker"] == w]).tolist() == list(range(n))
    # the claim counter was saved and restored exactly: no sample claimed twice, none missed
    assert_each_sample_once(log)
    steps = np.sort(log.applies["step"][log.applies["server"] == 0])
    assert steps.tolist() == list(range(1, steps[-1] + 1))
    assert steps[0] == 1 and cut["step"] < steps[-1]
    assert log.summary()["final_accuracy"] is not None
    # the async rule's rows: each ASP push once, at a step of its server, after its read
    pushes = log.pushes
    keys = set(zip(pushes["server"].tolist(), pushes["worker"].tolist(), pushes["clock"].tolist()))
    assert len(pushes) and len(keys) == len(pushes) and (pushes["tau"] >= 0).all()
    assert set(pushes["step"].tolist()) <= set(steps.tolist())
    # Sync-Switch's mode survived: one switch, before the cut, not again after it
    [switch] = log.events("switch")
    assert switch["to"] == "asp" and switch["clock"] <= min(cut["clocks"])


def test_work_lost_after_the_checkpoint_is_left_out(resumed):
    run, _, job = resumed
    cut = job.log.events("segment")[-1]
    rows = _segment_rows(run, 0)
    lost = rows["iteration"] >= np.asarray(cut["clocks"])[rows["worker"]]
    # the kill came after work was logged past the cut (the fixture made sure)
    assert lost.sum() > 0
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
