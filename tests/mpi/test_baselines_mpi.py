"""The modern baselines under real MPI: Local SGD's BSP oracle, backup
workers, and a Local SGD job killed between two pushes and resumed from its
checkpoint (the workers' inner optimizer state with it)."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_each_sample_once, even_rounds, kill_training_when, replayed_run, train

from mpips.config import load
from mpips.io.checkpoint import CheckpointError, checkpoint_files, decode, read_checkpoint
from mpips.io.log import RunLog

FLAGS = ["--batch-size", "16", "--iterations", "10", "--lr", "0.1", "--seed", "3"]


def bsp_config(momentum: float):
    return load(overrides={"lr": 0.1, "momentum": momentum, "seed": 3, "workers": 4})


def test_localsgd_of_one_sgd_step_averaged_is_bsp(tmp_path):
    log = train(5, tmp_path / "run", "--paradigm", "localsgd", "--local-steps", "1", "--momentum", "0",
                "--outer-lr", "1", "--outer-momentum", "0", "--slowdown", "1,1,2,4", *FLAGS).log
    config = bsp_config(0.0)
    expected = replayed_run(config, even_rounds(config, np.full((10, 4), 16)))
    assert np.abs(log.final_params() - expected).max() < 1e-6


def test_backup_workers_drop_a_straggler_and_without_them_are_bsp(tmp_path):
    """Two servers: b = 0 is the BSP replay bit for bit; with b = 1 the 4x
    slower worker's pushes are dropped, and both servers apply rounds of the
    same pushes (server 0 decides)."""
    none = train(6, tmp_path / "b0", "--paradigm", "backup", "--backup-workers", "0", "--momentum", "0.9",
                 "--servers", "2", "--slowdown", "1,1,2,4", *FLAGS).log
    config = bsp_config(0.9)
    np.testing.assert_array_equal(none.final_params(),
                                  replayed_run(config, even_rounds(config, np.full((10, 4), 16))))
    one = train(6, tmp_path / "b1", "--paradigm", "backup", "--servers", "2", "--slowdown", "1,1,1,4",
                "--device-time", "20ms", *FLAGS).log
    assert one.status == "finished" and 3 in {e["worker"] for e in one.events("dropped_push")}
    applies = one.applies
    pushes = [np.sort(applies[applies["server"] == s], order="step")["pushes"] for s in (0, 1)]
    assert np.array_equal(*pushes) and (pushes[0] <= 3).all()


# One worker, so that the run is deterministic whatever the cut: the killed and resumed job
# must end with the parameters of the job that was never stopped, bit for bit. Local SGD at
# its defaults (DiLoCo: H = 8, outer Nesterov 0.7/0.5; inner SGD with momentum 0.9), a push
# every 8 x 20 ms, a checkpoint every 0.5 s; 6 epochs of digits (about 7 s of device time).
LOCAL = ("--paradigm", "localsgd", "--workers", "1", "--dataset", "digits", "--batch-size", "16",
         "--epochs", "6", "--device-time", "20ms", "--checkpoint-every", "0.5", "--log-flush-seconds", "0.2",
         "--seed", "5")


def _newest(run_dir):
    """(clocks, worker state) of the newest checkpoint, or None while there is none."""
    files = checkpoint_files(str(run_dir))
    try:
        meta, ranks = read_checkpoint(files[-1]) if files else (None, None)
    except CheckpointError:
        return None   # pruned while we read it
    if meta is None:
        return None
    worker = next(s["role"] for s in (decode(*r) for r in ranks) if "inner" in s["role"])
    return meta["clocks"], worker


def _pushes_logged(run_dir) -> int:
    try:
        return len(RunLog(str(run_dir)).iterations)
    except Exception:   # noqa: BLE001 - a rank file being created or flushed
        return 0


def _kill_between_pushes(run_dir) -> tuple:
    """Kill the job once a checkpoint holds a worker that has pushed (its
    inner optimizer with a momentum buffer) and the log holds a push after it
    (work the resumed job must redo, not count twice). Returns the newest
    checkpoint's (clocks, worker state) at the kill."""
    def ready():
        found = _newest(run_dir)
        return bool(found) and found[0][0] > 0 and _pushes_logged(run_dir) > found[0][0]
    kill_training_when(2, run_dir, LOCAL, ready, "checkpoint after a push with a push logged after it")
    return _newest(run_dir)


def test_localsgd_resumes_between_pushes_as_if_never_stopped(tmp_path):
    whole = train(2, tmp_path / "whole", *LOCAL).log
    for attempt in range(3):
        # a checkpoint may land between the look and the kill: then nothing after
        # the cut is lost; kill a fresh run instead
        run = tmp_path / f"cut{attempt}"
        clocks, worker = _kill_between_pushes(run)
        if _pushes_logged(run) > clocks[0]:
            break
    else:
        pytest.fail("three kills in a row landed just after a checkpoint")
    # the cut: the worker between two pushes, its inner SGD's momentum in the checkpoint
    buffer = worker["inner"]["state"][0]["momentum_buffer"]
    assert worker["clock"] == clocks[0] > 0 and float(buffer.abs().sum()) > 0
    assert worker["local_step"] == 8 * clocks[0]   # whole local phases of H = 8 steps
    job = train(2, run, *LOCAL)
    assert "resuming from" in job.output, job.output
    log = job.log
    assert log.status == "finished" and log.segments == 2
    # the budget's samples trained exactly once, the pushes lost after the cut redone
    assert_each_sample_once(log)
    assert len(log.iterations) == len(whole.iterations)
    assert np.sort(log.iterations["clock"]).tolist() == list(range(len(whole.iterations)))
    # and the parameters of the job never stopped, bit for bit: the inner optimizer's
    # state, the outer Nesterov buffer, the data position all came back as they were
    np.testing.assert_array_equal(log.final_params(), whole.final_params())
