"""jobs/gssp.slurm under a real (single-node) Slurm: see conftest.py."""
from __future__ import annotations

from pathlib import Path

from mpips.log import RunLog

REPO = Path(__file__).resolve().parents[2]


def test_gssp_job_script(slurm, tmp_path):
    """As a user submits it, small settings from the environment: 1 server,
    2 group servers, 2 workers (the script adds the group servers' ranks)."""
    run_dir = tmp_path / "run"
    env = {"MPIPS_EPOCHS": "1", "MPIPS_WORKERS": "2", "MPIPS_GROUPS": "2",
           "MPIPS_SLOWDOWN": "1,3", "MPIPS_RUN_DIR": run_dir}
    job = slurm.submit(REPO / "jobs" / "gssp.slurm", env=env, args=["--ntasks=5"], cwd=tmp_path)
    assert slurm.wait(job, timeout=300) == "COMPLETED", slurm.describe(job)
    log = RunLog(str(run_dir))
    assert log.paradigm == "gssp" and log.status == "finished"
    assert log.layout["group_servers"] == 2 and log.layout["world_size"] == 5
    (groups,) = log.events("gssp_groups")
    assert groups["groups"] == [[0], [1]]
    assert sorted(set(log.exchanges["group"].tolist())) == [0, 1]
    assert len(log.evaluations) >= 1
