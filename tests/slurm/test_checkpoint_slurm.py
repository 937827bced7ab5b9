"""Preemption on a real Slurm: a running job sent USR1 writes a checkpoint,
exits 3, is requeued, resumes from the checkpoint and ends with the same
parameters as a run that was never interrupted (see conftest.py for the cluster)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
from conftest import wait_for_line

from mpips.io.log import RunLog

REPO = Path(__file__).resolve().parents[2]
# BSP: the same model whatever the timing, so the two runs can be compared bit for bit.
# A device time of 20 ms an iteration (5.3 s of training): the signal, sent once epoch 2
# is printed, reaches the ranks well before the end (without it the run took 0.4 s, and a
# signal that came after the last round found the run finished: exit 0, not requeued).
SETTINGS = {"MPIPS_EPOCHS": "6", "MPIPS_WORKERS": "2", "MPIPS_DEVICE_TIME": "20ms",
            "MPIPS_ARGS": "--budget per-worker"}


def test_preempted_job_resumes_from_its_checkpoint(slurm, tmp_path):
    script = REPO / "jobs" / "bsp.slurm"
    reference = tmp_path / "reference"
    preempted = tmp_path / "preempted"
    ref = slurm.submit(script, env={**SETTINGS, "MPIPS_RUN_DIR": reference}, args=["--ntasks=3"],
                       cwd=tmp_path)
    job = slurm.submit(script, env={**SETTINGS, "MPIPS_RUN_DIR": preempted}, args=["--ntasks=3"],
                       cwd=tmp_path)
    wait_for_line(slurm, job, "mpips: epoch  2.00")
    slurm.run("scancel", "--batch", "--signal=USR1", job)   # what --signal=B:USR1@120 sends
    assert slurm.wait(job, timeout=300) == "COMPLETED", slurm.describe(job)
    assert slurm.wait(ref, timeout=300) == "COMPLETED", slurm.describe(ref)
    assert slurm.job_info(job)["Restarts"] == "1", slurm.describe(job)
    out = Path(slurm.job_info(job)["StdOut"]).read_text(errors="replace").replace("\0", "")
    assert "(preemption)" in out and "exiting with status 3" in out, out
    assert "requeueing job" in out and "resuming from" in out, out

    log, ref_log = RunLog(str(preempted)), RunLog(str(reference))
    assert log.status == "finished" and log.segments == 2
    [checkpoint] = log.events("checkpoint")
    assert checkpoint["reason"] == "preemption"
    cut = log.events("segment")[-1]
    assert cut["segment"] == 1 and cut["step"] == checkpoint["step"] > 0
    # every iteration of every worker exactly once across the two segments:
    # the checkpoint was a consistent cut, so nothing was redone either
    n = log.layout["iterations_per_worker"]
    it = log.iterations
    assert log.redone["iterations"] == 0
    for w in range(2):
        assert np.sort(it["iteration"][it["worker"] == w]).tolist() == list(range(n))
        assert np.sort(it["clock"][it["worker"] == w]).tolist() == list(range(n))
        assert cut["clocks"][w] == checkpoint["clocks"][w]
    # the same run as the uninterrupted one, bit for bit: the checkpoint held
    # everything (momentum, pending slots, data positions), and servers sum the
    # two workers' slots in worker order, so a BSP round's sum does not depend on
    # which push arrived first
    np.testing.assert_array_equal(log.final_params(), ref_log.final_params())
    assert log.summary()["final_accuracy"] == ref_log.summary()["final_accuracy"]


def test_scancel_checkpoints_is_not_requeued_and_the_job_again_resumes(slurm, tmp_path):
    """`scancel` (and a time limit) signal TERM to every process of the job:
    the ranks, the script and mpirun, which passes it on, exits 1 and kills
    its ranks about half a second later (outside Slurm) or leaves them to
    end. The script says whether they checkpointed and exits 143 if so (it
    said only `launcher exited with status 1`, exit 1); never requeued."""
    script = REPO / "jobs" / "bsp.slurm"
    run = tmp_path / "run"
    job = slurm.submit(script, env={**SETTINGS, "MPIPS_RUN_DIR": run}, args=["--ntasks=3"], cwd=tmp_path)
    wait_for_line(slurm, job, "mpips: epoch  2.00")
    slurm.run("scancel", job)
    assert slurm.wait(job, timeout=120) == "CANCELLED", slurm.describe(job)
    out = Path(slurm.job_info(job)["StdOut"]).read_text(errors="replace").replace("\0", "")
    assert "requeueing" not in out and slurm.job_info(job)["Restarts"] == "0", out
    checkpoints = list((run / "checkpoints").glob("ckpt-*.h5"))
    if not checkpoints:   # the ranks ended before theirs (seen with neither model tried here)
        assert "stopped by SIGTERM without a checkpoint" in out and slurm.job_info(job)["ExitCode"] == "1:0", out
        return
    assert "stopped by SIGTERM after a checkpoint" in out, out
    assert slurm.job_info(job)["ExitCode"] == "143:0", slurm.describe(job)
    again = slurm.submit(script, env={**SETTINGS, "MPIPS_RUN_DIR": run}, args=["--ntasks=3"], cwd=tmp_path)
    assert slurm.wait(again, timeout=300) == "COMPLETED", slurm.describe(again)
    out = Path(slurm.job_info(again)["StdOut"]).read_text(errors="replace").replace("\0", "")
    assert "resuming from" in out, out
    assert RunLog(str(run)).completeness()["complete"]
