"""`mpips compare` under mpiexec, as a user runs it: two paradigms, one seed,
1 server + 2 workers, 1 epoch; each run an MPI job of the ranks it needs."""
from __future__ import annotations

import csv
import os
import subprocess
import sys

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
        assert [(r["run"], r["layout"]) for r in csv.DictReader(fh)] == [("bsp-s0", "1+0+2"), ("ssp-s0", "1+0+2")]
    assert [line.split()[0] for line in p.stdout.splitlines() if line.startswith(("bsp-s0 ", "ssp-s0 "))] == \
        ["bsp-s0", "ssp-s0"]                                                # the table on the terminal
    assert {"accuracy.png", "staleness.png", "time_to_target.png"} <= {f.name for f in out.glob("*.png")}

