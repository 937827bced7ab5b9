"""jobs/sweep.slurm under a real (single-node) Slurm: an array job over
paradigms x seeds whose runs the analysis script reads together."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from mpips.io.log import RunLog

REPO = Path(__file__).resolve().parents[2]


def test_sweep_array_job_runs_every_paradigm_and_seed(slurm, tmp_path):
    sweep = tmp_path / "sweep"
    env = {"MPIPS_EPOCHS": "1", "MPIPS_WORKERS": "2", "MPIPS_SWEEP_PARADIGMS": "ssp gssp",
           "MPIPS_SWEEP_SEEDS": "0 1", "MPIPS_SWEEP_DIR": sweep}
    # task 4 is past 2 paradigms x 2 seeds: it must end at once, successfully
    job = slurm.submit(REPO / "jobs" / "sweep.slurm", env=env, args=["--array=0-4", "--ntasks=5"],
                       cwd=tmp_path)
    for task in range(5):
        assert slurm.wait(f"{job}_{task}", timeout=300) == "COMPLETED", slurm.describe(f"{job}_{task}")
    runs = sorted(p.name for p in sweep.iterdir())
    assert runs == ["gssp-s0", "gssp-s1", "ssp-s0", "ssp-s1"]
    for name in runs:
        log = RunLog(str(sweep / name))
        assert log.status == "finished" and log.paradigm == name.split("-")[0]
        assert log.config["seed"] == int(name[-1])
    table = subprocess.run([sys.executable, str(REPO / "analysis" / "summarize.py"), *map(str, sweep.iterdir()),
                            "--mean"], capture_output=True, text=True, check=True).stdout
    rows = [line for line in table.splitlines() if line.startswith(("ssp", "gssp"))]
    assert len(rows) == 2 and all(" 2 " in row for row in rows), table   # one row per paradigm, 2 runs each
