"""jobs/gssp.slurm under a real (single-node) Slurm: see conftest.py."""
from __future__ import annotations

from pathlib import Path

import numpy as np
from conftest import wait_for_line

from mpips.io.log import RunLog
from tests.thresholds import SETUPS

REPO = Path(__file__).resolve().parents[2]


def test_gssp_job_script_preempted_and_requeued(slurm, tmp_path):
    """As a user submits it, small settings from the environment: 1 server,
    2 group servers, 2 workers (the script adds the group servers' ranks).
    Sent USR1 as Slurm does before the time limit, its group servers pass the
    checkpoint on to their groups; it exits 3, is requeued, resumes, finishes."""
    run_dir = tmp_path / "run"
    env = {"MPIPS_EPOCHS": "8", "MPIPS_WORKERS": "2", "MPIPS_GROUPS": "2",
           "MPIPS_SLOWDOWN": "1,3", "MPIPS_RUN_DIR": run_dir, "MPIPS_ARGS": "--budget per-worker"}
    job = slurm.submit(REPO / "jobs" / "gssp.slurm", env=env, args=["--ntasks=5"], cwd=tmp_path)
    wait_for_line(slurm, job, "mpips: epoch  2.")
    slurm.run("scancel", "--batch", "--signal=USR1", job)
    assert slurm.wait(job, timeout=300) == "COMPLETED", slurm.describe(job)
    assert slurm.job_info(job)["Restarts"] == "1", slurm.describe(job)
    out = Path(slurm.job_info(job)["StdOut"]).read_text(errors="replace").replace("\0", "")
    assert "(preemption)" in out and "resuming from" in out, out

    log = RunLog(str(run_dir))
    assert log.paradigm == "gssp" and log.status == "finished" and log.segments == 2
    assert log.layout["group_servers"] == 2 and log.layout["world_size"] == 5
    groups = log.events("groups")
    assert [g["groups"] for g in groups] == [[[0], [1]]] * 2
    assert [g["source"] for g in groups] == ["equal", "checkpoint"]
    n = log.layout["iterations_per_worker"]
    for w in range(2):
        assert np.sort(log.iterations["iteration"][log.iterations["worker"] == w]).tolist() == list(range(n))
    assert sorted(set(log.exchanges["group"].tolist())) == [0, 1]
    assert log.summary()["final_accuracy"] >= SETUPS["gssp-slurm"].threshold
