"""`mpips compare` under mpiexec, as a user runs it: two paradigms, one seed,
1 server + 2 workers, 1 epoch; each run an MPI job of the ranks it needs."""
from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time

from conftest import MPI_ENV, MPIEXEC

from mpips.io.log import RunLog

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_compare_trains_each_paradigm_as_an_mpi_job(tmp_path):
    runs, out = tmp_path / "runs", tmp_path / "out"
    p = subprocess.run([sys.executable, "-m", "mpips", "compare", "--paradigms", "bsp,ssp", "--workers", "2",
                        "--epochs", "1", "--stall-timeout", "60", "--timeout", "180", "--target", "0.5",
                        "--runs", str(runs), "--out", str(out)],
                       cwd=ROOT, env={**os.environ, **MPI_ENV}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, errors="replace", timeout=420)
    assert p.returncode == 0, p.stdout[-4000:]
    for name in ("bsp-s0", "ssp-s0"):
        with open(runs / f"{name}.out") as fh:
            assert fh.readline().startswith(f"{MPIEXEC} -n 3 ")   # 1 server + 2 workers
        log = RunLog(str(runs / name))
        assert log.status == "finished" and log.config["paradigm"] == name[:3]
        assert not log.versions["mpi"].startswith("none")                 # not the simulator
    with open(out / "table.csv") as fh:
        rows = [(r["run"], r["layout"]) for r in csv.DictReader(fh)]
    assert sorted(rows) == [("bsp-s0", "1+0+2"), ("ssp-s0", "1+0+2")]
    # the table on the terminal, in the ranking's order, and its winner named
    assert [line.split()[0] for line in p.stdout.splitlines() if line.startswith(("bsp-s0 ", "ssp-s0 "))] == \
        [run for run, _ in rows]
    assert f"winner: {rows[0][0][:3]}" in p.stdout
    assert {"accuracy.png", "staleness.png", "time_to_target.png"} <= {f.name for f in out.glob("*.png")}



def test_sigterm_to_compare_ends_its_mpi_run(tmp_path):
    """It left the MPI run training after compare had exited. The stop is
    passed on as SIGUSR1 (Open MPI's mpirun kills its ranks at once on
    SIGTERM): the run checkpoints and exits (resumable with --reuse), and
    compare exits 143 with no process of the run left."""
    runs = tmp_path / "runs"
    compare = subprocess.Popen([sys.executable, "-m", "mpips", "compare", "--paradigms", "bsp", "--workers", "2",
                                "--epochs", "200", "--stall-timeout", "60", "--runs", str(runs)],
                               cwd=ROOT, env={**os.environ, **MPI_ENV}, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, errors="replace")
    try:
        deadline = time.monotonic() + 240
        while not (runs / "bsp-s0" / "run.h5").exists():   # the run is training
            assert compare.poll() is None and time.monotonic() < deadline, compare.communicate()[0]
            time.sleep(0.2)
        compare.send_signal(signal.SIGTERM)
        output = compare.communicate(timeout=120)[0]
    finally:
        compare.kill()
    assert compare.returncode == 128 + signal.SIGTERM, output
    assert "mpips: error: the comparison stopped on SIGTERM: 0 of 1 runs finished" in output
    with open(runs / "bsp-s0.out") as fh:
        run = fh.read()
    assert "mpips: checkpoint 1 (preemption)" in run and "exiting with status 3" in run, run
    assert RunLog(str(runs / "bsp-s0")).status == "preempted"
    assert not running(str(runs / "bsp-s0"))


def running(path: str) -> list[int]:
    """The processes whose command line names `path`."""
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                if path.encode() in fh.read():
                    found.append(int(entry))
        except OSError:
            continue
    return found
