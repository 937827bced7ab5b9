"""A pool of MPI ranks that runs `mpips train` jobs one after another, for
the tests that run jobs (tests/mpi/conftest.py's `train`, tests/portability).

    mpiexec -n RANKS python tests/job_pool.py FOLDER PARENT_PID   # started by JobPool

Why: on this 2-core machine a job of 5 ranks spent about 7 s of its 10 s
importing torch (2.3 s of CPU a rank), before any MPI; one launch for all
the jobs of the suite pays it once. A job here is `mpips train` as a user's
launch runs it (`mpips.cli.main`, over a communicator of the pool's first N
ranks, its output captured per rank), in a process that ran other jobs
before: tests that need a job of its own (killed, preempted, expected to
fail, another environment) launch it themselves.

The protocol, through files in FOLDER (every rank reads the same files, so
no rank waits inside an MPI call while no job runs, and idle ranks sleep
rather than spin while one does):
- `request-K.json`, K = 0, 1, ...: {"ranks": N, "argv": [...]}, or
  {"stop": true}; written elsewhere and renamed into place, so whole.
- `reply-K.json`: {"returncode": ..., "output": ...}, by rank 0 once every
  rank of job K is done: the first non-zero exit status of its ranks, and
  their outputs in rank order.
A job that aborts (`comm.Abort`: an unexpected exception on a rank) ends
the pool; the test sees it die and starts a new one. The pool ends too
when its parent (the pytest process) is gone.
"""
from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import psutil

from mpips.experiments.launch import MPIEXEC

POLL = 0.02   # seconds between two looks at the folder, or at the end of a job


def capture(path: str, run):
    """run() with this process's stdout and stderr (file descriptors 1 and 2,
    so MPI's and torch's own messages too) going to the file `path`."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with open(path, "w") as fh:
        os.dup2(fh.fileno(), 1)
        os.dup2(fh.fileno(), 2)
        try:
            return run()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])


def run_job(comm, argv: list[str], output: str) -> int:
    from mpips import cli

    def main():
        try:
            return cli.main(argv, comm=comm)
        except SystemExit as e:   # argparse's errors
            return e.code if isinstance(e.code, int) else 2
    return capture(output, main)


def wait_for_all(world) -> None:
    """A barrier that sleeps between its tests: the ranks done (and the idle
    ones) leave the CPU to the ranks still training."""
    done = world.Ibarrier()
    while not done.Test():
        time.sleep(POLL)


def write_whole(folder: str, name: str, message: dict) -> None:
    """`message` as the JSON file `name`, written elsewhere and renamed into
    place: whoever polls for it reads it whole."""
    tmp = os.path.join(folder, f".{name}")
    with open(tmp, "w") as fh:
        json.dump(message, fh)
    os.replace(tmp, os.path.join(folder, name))


def output_path(folder: str, k: int, rank: int) -> str:
    return os.path.join(folder, f"output-{k}-{rank}.txt")


def outputs(folder: str, k: int, n: int) -> str:
    """Job k's output: its ranks' in rank order (those written, if it died)."""
    out = ""
    for rank in range(n):
        if os.path.exists(output_path(folder, k, rank)):
            with open(output_path(folder, k, rank), errors="replace") as fh:
                out += fh.read()
    return out


def serve(folder: str, parent: int) -> None:
    from mpi4py import MPI  # (here: the pytest process that imports JobPool is no MPI rank)

    world = MPI.COMM_WORLD
    rank = world.Get_rank()
    for k in range(sys.maxsize):
        path = os.path.join(folder, f"request-{k}.json")
        while not os.path.exists(path):
            if not psutil.pid_exists(parent):
                return
            time.sleep(POLL)
        with open(path) as fh:
            request = json.load(fh)
        if request.get("stop"):
            return
        n = int(request["ranks"])
        comm = world.Split(0 if rank < n else MPI.UNDEFINED, rank)
        code = 0
        if comm != MPI.COMM_NULL:
            code = run_job(comm, request["argv"], output_path(folder, k, rank))
            comm.Free()
        wait_for_all(world)
        codes = world.gather(code, root=0)
        if rank == 0:
            write_whole(folder, f"reply-{k}.json",
                        {"returncode": next((c for c in codes if c), 0), "output": outputs(folder, k, n)})


class JobPool:
    """A test session's pool: `ranks` ranks under this Python's mpiexec
    (`env`: its set-up) that run the jobs expected to
    succeed, one after another; started at the first, again after a job
    that ended it (an abort)."""

    START = 120   # seconds the launch may take before its first job (its ranks import torch)

    def __init__(self, ranks: int, env: dict):
        self.ranks, self.env = ranks, env
        self.proc = None
        atexit.register(self.stop)   # (a second import of the conftest makes a second pool)

    def start(self) -> None:
        self.folder = tempfile.mkdtemp(prefix="mpips-job-pool-")
        self.next = 0
        self.output = open(os.path.join(self.folder, "pool.txt"), "w+")
        cmd = [MPIEXEC, "-n", str(self.ranks), sys.executable, os.path.abspath(__file__),
               self.folder, str(os.getpid())]
        self.proc = subprocess.Popen(cmd, stdout=self.output, stderr=subprocess.STDOUT,
                                     env={**os.environ, **self.env})

    def run(self, n: int, argv: list[str], timeout: float) -> tuple[int, str]:
        """`mpips ARGV` on n ranks: its exit status and output."""
        if self.proc is not None and self.proc.poll() is not None:
            self._end()   # it ended between two jobs
        if self.proc is None:
            self.start()
            timeout += self.START
        k, self.next = self.next, self.next + 1
        write_whole(self.folder, f"request-{k}.json", {"ranks": n, "argv": argv})
        reply, deadline = os.path.join(self.folder, f"reply-{k}.json"), time.monotonic() + timeout
        while not os.path.exists(reply):
            ended = self.proc.poll() is not None
            if ended or time.monotonic() > deadline:
                if not ended:
                    kill_job(self.proc)
                self.output.seek(0)
                why = "the job pool ended" if ended else f"the job ran past {timeout:.0f} s"
                out = f"{outputs(self.folder, k, n)}{self.output.read()}\n{why}"
                self._end()
                return 1, out
            time.sleep(POLL)
        with open(reply) as fh:
            answer = json.load(fh)
        return answer["returncode"], answer["output"]

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            write_whole(self.folder, f"request-{self.next}.json", {"stop": True})
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                kill_job(self.proc)
        self._end()

    def _end(self) -> None:
        self.proc = None
        self.output.close()
        shutil.rmtree(self.folder, ignore_errors=True)


def kill_job(p: subprocess.Popen) -> None:
    """SIGKILL every rank of the job mpiexec `p` started (a node lost), then
    let mpiexec end. Killing mpiexec alone, or its process group, leaves the
    ranks running (each is in a process group of its own: they would go on
    training under the next tests), and a mpiexec killed leaves its session
    directory (/tmp/ompi.PID) behind: PIDs wrap at 32768 here, and a later
    mpiexec given the same PID fails to start ("The PMIx server's listener
    thread failed to start"). Told that its ranks died, mpiexec removes it."""
    try:
        ranks = psutil.Process(p.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        ranks = []
    for proc in ranks:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(ranks, timeout=30)
    try:
        p.wait(timeout=30)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


if __name__ == "__main__":
    serve(sys.argv[1], int(sys.argv[2]))
