"""jobs/common.sh when a job is stopped (scancel's TERM to every process of
the job): the launcher, signalled too, may pass the signal on and exit 1, or
die of it (exit 143, as Open MPI's mpirun did once across nodes while its
daemons' srun failed); either way the script says whether the ranks
checkpointed and never requeues."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


DIES = "trap - TERM; kill -TERM $BASHPID"


# (exit 1 with a checkpoint: tests/slurm/test_checkpoint_slurm.py, with a real mpirun)
@pytest.mark.parametrize("launcher_exit, checkpointed", [("exit 1", False), (DIES, False), (DIES, True)],
                         ids=["exits-1", "dies-of-it", "dies-of-it-after-a-checkpoint"])
def test_a_stopped_job_says_whether_it_checkpointed_whatever_its_launcher_exits(tmp_path, launcher_exit, checkpointed):
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    # a stand-in for mpirun: TERM reaches the job's shell (scancel), then the launcher ends
    fake = ('mpips_mpi_flavor() { echo openmpi; }; mpirun() { trap "" USR1; kill -TERM $$; sleep 0.5; '
            + (f'touch "{run}/checkpoints/ckpt-00001.h5"; ' if checkpointed else "") + f"{launcher_exit}; }}")
    script = f'source "{ROOT}/jobs/common.sh" >/dev/null 2>&1; {fake}; mpips_train bsp'
    p = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=120,
                       env={"MPIPS_PYTHON": sys.executable, "MPIPS_ROOT": str(ROOT), "PATH": "/usr/bin:/bin",
                            "MPIPS_RUN_DIR": str(run)})
    said = p.stdout + p.stderr
    assert "SIGTERM: asking for a checkpoint" in said and "requeueing" not in said, said
    if checkpointed:
        assert "stopped by SIGTERM after a checkpoint" in said and p.returncode == 143, said
    else:
        assert "stopped by SIGTERM without a checkpoint" in said and p.returncode != 0, said
