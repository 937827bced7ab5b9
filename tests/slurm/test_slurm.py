"""The job scripts under a real (single-node) Slurm: see conftest.py."""
from __future__ import annotations

import glob
import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

RANKS_JOB = """\
#!/bin/bash
#SBATCH --job-name=mpips-ranks
#SBATCH --ntasks=2
#SBATCH --time=00:05:00
source "$MPIPS_ROOT/jobs/common.sh" || exit 1
mpips_launch 2 python -c "from mpi4py import MPI; c = MPI.COMM_WORLD; print(f'rank {c.Get_rank()} of {c.Get_size()}', flush=True)"
"""


def _ranks_job(tmp_path: Path) -> Path:
    script = tmp_path / "ranks.slurm"
    script.write_text(RANKS_JOB)
    return script


def _output(slurm, job: str) -> str:
    return Path(slurm.job_info(job)["StdOut"]).read_text(errors="replace").replace("\0", "")


def test_trivial_mpi_job(slurm, tmp_path):
    job = slurm.submit(_ranks_job(tmp_path), env={"MPIPS_ROOT": REPO}, cwd=tmp_path)
    assert slurm.wait(job, timeout=60) == "COMPLETED", slurm.describe(job)
    out = _output(slurm, job)
    assert sorted(re.findall(r"^rank (\d) of 2$", out, re.M)) == ["0", "1"], out
    assert "launcher: mpirun" in out, out


def test_srun_launcher_or_fallback(slurm, tmp_path):
    """MPIPS_LAUNCHER=srun uses pmix/pmi2 when Slurm has it, else falls back to mpirun."""
    job = slurm.submit(_ranks_job(tmp_path), env={"MPIPS_ROOT": REPO, "MPIPS_LAUNCHER": "srun"},
                       cwd=tmp_path)
    assert slurm.wait(job, timeout=60) == "COMPLETED", slurm.describe(job)
    out = _output(slurm, job)
    assert sorted(re.findall(r"^rank (\d) of 2$", out, re.M)) == ["0", "1"], out
    # Debian lists mpi/pmix even without the library it dlopens (libpmix-dev
    # has it; the fixture installs it along with Slurm).
    if (any(p.startswith("pmix") for p in slurm.srun_mpi_plugins())
            and glob.glob("/usr/lib/*/pmix2/lib/libpmix.so")):
        assert "launcher: srun --mpi=pmix" in out, out
    else:
        assert "no working pmix/pmi2 plugin" in out and "launcher: mpirun" in out, out


USR1_JOB = """\
#!/bin/bash
#SBATCH --job-name=mpips-usr1
#SBATCH --ntasks=2
#SBATCH --time=00:05:00
#SBATCH --open-mode=append
#SBATCH --requeue
source "$MPIPS_ROOT/jobs/common.sh" || exit 1
echo "start restart=${SLURM_RESTART_COUNT:-0}"
mpips_launch 2 python {script}
"""

USR1_RANK = """\
import os, signal, sys, time
from mpi4py import MPI
rank = MPI.COMM_WORLD.Get_rank()
if os.environ.get("SLURM_RESTART_COUNT", "0") != "0":
    print(f"rank {rank} resumed", flush=True)
    sys.exit(0)
got = []
signal.signal(signal.SIGUSR1, lambda signum, frame: got.append(signum))
open(f"{sys.argv[1]}/ready.{rank}", "w").close()
deadline = time.monotonic() + 120
while not got and time.monotonic() < deadline:
    time.sleep(0.05)
if got:
    print(f"rank {rank} got USR1", flush=True)
# Both ranks report before either exits: mpirun kills the others at the first exit.
MPI.COMM_WORLD.Barrier()
sys.exit(3)  # "checkpointed, not finished"
"""


def _signalled_job(slurm, tmp_path, signal_name: str) -> str:
    """A job of USR1_RANK's ranks, sent `signal_name` (to its batch shell) once both are ready."""
    rank_py = tmp_path / "rank.py"
    rank_py.write_text(USR1_RANK)
    script = tmp_path / "signalled.slurm"
    script.write_text(USR1_JOB.replace("{script}", f"{rank_py} {tmp_path}"))
    job = slurm.submit(script, env={"MPIPS_ROOT": REPO}, cwd=tmp_path)
    deadline = time.monotonic() + 60
    while not all((tmp_path / f"ready.{r}").exists() for r in (0, 1)):
        assert time.monotonic() < deadline, slurm.describe(job)
        time.sleep(0.1)
    slurm.run("scancel", "--batch", f"--signal={signal_name}", job)
    return job


def test_usr1_is_forwarded_and_requeues(slurm, tmp_path):
    """`--signal=B:USR1` reaches every rank through common.sh and mpirun; a
    non-zero exit after it requeues the job, which then resumes."""
    job = _signalled_job(slurm, tmp_path, "USR1")
    # The requeued run starts cred_expire + 1 s later: 121 s by default, 6 s
    # on the test cluster (StartTime=now is refused: "Job credential revoked").
    assert slurm.wait(job, timeout=60) == "COMPLETED", slurm.describe(job)
    out = _output(slurm, job)
    assert sorted(re.findall(r"^rank (\d) got USR1$", out, re.M)) == ["0", "1"], out
    assert "requeueing job" in out, out
    assert sorted(re.findall(r"^rank (\d) resumed$", out, re.M)) == ["0", "1"], out
    assert slurm.job_info(job)["Restarts"] == "1"


def test_term_to_the_script_checkpoints_and_is_not_requeued(slurm, tmp_path):
    """SIGTERM to the batch shell (`scancel --signal=TERM --batch`, as a user
    stopping a job) asks the ranks for the checkpoint with USR1 (mpirun,
    signalled TERM itself, kills its ranks at once); the job ends with 143,
    not requeued."""
    job = _signalled_job(slurm, tmp_path, "TERM")
    assert slurm.wait(job, timeout=60) == "FAILED", slurm.describe(job)
    out = _output(slurm, job)
    assert sorted(re.findall(r"^rank (\d) got USR1$", out, re.M)) == ["0", "1"], out
    assert "SIGTERM: asking for a checkpoint" in out and "stopped by SIGTERM after a checkpoint" in out, out
    assert "requeueing" not in out and slurm.job_info(job)["Restarts"] == "0", out
    assert slurm.job_info(job)["ExitCode"] == "143:0", slurm.describe(job)


def test_gpu_settings_reach_the_job(slurm, tmp_path):
    """MPIPS_DEVICE=cuda and MPIPS_MPS as a GPU user sets them, on this node
    without a GPU: the script says MPS cannot start, the job ends with the
    one-line device error (never a hang), and a bad MPIPS_MPS is refused."""
    env = {"MPIPS_EPOCHS": "1", "MPIPS_WORKERS": "2", "MPIPS_DEVICE": "cuda", "MPIPS_MPS": "1",
           "MPIPS_RUN_DIR": tmp_path / "run"}
    job = slurm.submit(REPO / "jobs" / "bsp.slurm", env=env, args=["--ntasks=3"], cwd=tmp_path)
    assert slurm.wait(job, timeout=300) == "FAILED", slurm.describe(job)
    out = _output(slurm, job)
    if shutil.which("nvidia-cuda-mps-control") is None:
        assert "nvidia-cuda-mps-control not found" in out, out
    assert "--device cuda" in out and "no CUDA device visible" in out, out
    assert "Traceback" not in out, out
    job = slurm.submit(REPO / "jobs" / "bsp.slurm", env={**env, "MPIPS_MPS": "maybe"}, args=["--ntasks=3"],
                       cwd=tmp_path)
    assert slurm.wait(job, timeout=120) == "FAILED", slurm.describe(job)
    assert "MPIPS_MPS=maybe: expected 1, 0 or auto" in _output(slurm, job)


FAKE_MAIN = """\
import json, sys
from mpi4py import MPI
c = MPI.COMM_WORLD
if c.Get_rank() == 0:
    print("ARGV " + json.dumps(sys.argv[1:]), flush=True)
print(f"rank {c.Get_rank()} of {c.Get_size()}", flush=True)
"""


def test_ssp_script_builds_the_command(slurm, tmp_path):
    """jobs/ssp.slurm in a copy of the repository whose `python -m mpips`
    only prints its arguments: submitted from elsewhere by path, as a user
    would, so the script must find the repository through Slurm."""
    fake = tmp_path / "repo"
    (fake / "jobs").mkdir(parents=True)
    (fake / "mpips").mkdir()
    for name in ("common.sh", "ssp.slurm"):
        shutil.copy(REPO / "jobs" / name, fake / "jobs" / name)
    shutil.copy(REPO / "mpips" / "config.py", fake / "mpips" / "config.py")
    (fake / "mpips" / "__main__.py").write_text(FAKE_MAIN)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {"MPIPS_EPOCHS": "1", "MPIPS_WORKERS": "2", "MPIPS_SLOWDOWN": "1,2",
           "MPIPS_NESTEROV": "1", "MPIPS_ARGS": "--lr 0.1", "MPIPS_VENV": REPO / ".venv"}
    job = slurm.submit(fake / "jobs" / "ssp.slurm", env=env, args=["--ntasks=3"],
                       cwd=elsewhere)
    assert slurm.wait(job, timeout=60) == "COMPLETED", slurm.describe(job)
    assert slurm.job_info(job)["StdOut"] == str(elsewhere / f"slurm-mpips-ssp-{job}.out")
    out = _output(slurm, job)
    assert sorted(re.findall(r"^rank (\d) of 3$", out, re.M)) == ["0", "1", "2"], out
    argv = json.loads(re.search(r"^ARGV (.*)$", out, re.M).group(1))
    assert argv[0] == "train" and "--nesterov" in argv, argv
    argv.remove("--nesterov")
    flags = dict(zip(argv[1::2], argv[2::2]))
    assert flags == {"--paradigm": "ssp", "--servers": "1", "--workers": "2",
                     "--epochs": "1", "--slowdown": "1,2", "--lr": "0.1",
                     "--run-dir": str(fake / "runs" / job)}, argv


@pytest.mark.skipif(not (REPO / "mpips" / "cli.py").exists(),
                    reason="mpips/cli.py (python -m mpips train/info) does not exist yet")
def test_ssp_job_script(slurm, tmp_path, venv_python):
    """jobs/ssp.slurm as a user would submit it, from another directory, with
    small settings from the environment only."""
    run_dir = tmp_path / "run"
    env = {"MPIPS_EPOCHS": "1", "MPIPS_WORKERS": "2", "MPIPS_SLOWDOWN": "1,2",
           "MPIPS_RUN_DIR": run_dir}
    job = slurm.submit(REPO / "jobs" / "ssp.slurm", env=env, args=["--ntasks=3"], cwd=tmp_path)
    assert slurm.wait(job, timeout=300) == "COMPLETED", slurm.describe(job)
    assert (run_dir / "run.h5").exists(), slurm.describe(job)
    r = subprocess.run([venv_python, "-m", "mpips", "info", str(run_dir), "--json"],
                       cwd=REPO, capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["paradigm"] == "ssp"
    assert 0.0 <= info["final_accuracy"] <= 1.0, info
    assert info["updates"] > 0, info
