"""Other MPIs and the network path: one short job per paradigm (`make test-portability`).

The same tiny jobs run under two MPI set-ups, chosen by MPIPS_PORTABILITY:

- `mpich`: MPICH from PyPI in its own venv (.venv-mpich, built by the make
  target): pytest runs with that venv's Python, so the mpiexec beside it
  (Hydra) starts the job and mpi4py loads MPICH;
- `ompi-tcp`: Open MPI (.venv) with the inter-node path forced: one-sided
  operations through osc/rdma over the TCP BTL instead of shared memory,
  as between two nodes.

Each job must end with exit status 0 and a complete log: status finished,
every worker's every iteration logged, the global sample budget used once,
the final parameters written, and the MPI library named in the log the one
this flavour is about.
"""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from mpips.experiments.launch import MPI_ENV, MPIEXEC
from mpips.io.log import RunLog

FLAVOR = os.environ.get("MPIPS_PORTABILITY", "")
TIMEOUT = 120
ITERATIONS = 6

FLAVORS = {
    # mpiexec's own time limit as a second net under pytest-timeout
    "mpich": ({"MPIEXEC_TIMEOUT": str(TIMEOUT)}, [], "MPICH"),
    "ompi-tcp": ({**MPI_ENV, "OMPI_MCA_osc": "rdma", "OMPI_MCA_btl": "tcp,self"},
                 ["--timeout", str(TIMEOUT)], "Open MPI"),
}

# (name, ranks, workers, flags): the smallest layout that exercises each paradigm
JOBS = [
    ("bsp", 3, 2, ["--paradigm", "bsp"]),
    ("ssp", 3, 2, ["--paradigm", "ssp", "--staleness", "1", "--slowdown", "1,2"]),
    ("gssp-gdtopk", 5, 2, ["--paradigm", "gssp", "--groups", "2", "--compressor", "gdtopk",
                           "--profile-iterations", "1"]),
    ("syncswitch", 3, 2, ["--paradigm", "syncswitch", "--switch-at", "0.5"]),
    ("dssp-2-servers", 4, 2, ["--paradigm", "dssp", "--servers", "2", "--slowdown", "1,2"]),
]

pytestmark = pytest.mark.skipif(FLAVOR not in FLAVORS,
                                reason="set MPIPS_PORTABILITY=mpich or ompi-tcp (make test-portability)")


@pytest.mark.parametrize("name,ranks,workers,flags", JOBS, ids=[j[0] for j in JOBS])
def test_short_job_ends_with_a_complete_log(tmp_path, name, ranks, workers, flags):
    env, mpiexec_flags, library = FLAVORS[FLAVOR]
    run = tmp_path / "run"
    cmd = [MPIEXEC, *mpiexec_flags, "-n", str(ranks), sys.executable, "-m", "mpips", "train",
           "--run-dir", str(run), "--iterations", str(ITERATIONS), "--stall-timeout", "60", *flags]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       errors="replace", env={**os.environ, **env}, timeout=TIMEOUT + 30)
    out = p.stdout.replace("\x00", "")
    assert p.returncode == 0, f"{FLAVOR} {name}: exit {p.returncode}\n{out[-3000:]}"
    log = RunLog(str(run))
    assert library in log.versions["mpi"], log.versions["mpi"]
    assert log.status == "finished"
    it = log.iterations
    for w in range(workers):   # every iteration of every worker logged, none twice
        mine = sorted(it["iteration"][it["worker"] == w].tolist())
        assert mine == list(range(len(mine))) and mine, w
    # and together they used the run's sample budget, each stream position once
    positions = np.sort(np.concatenate([np.arange(s, s + b) for s, b in zip(it["sample"], it["batch"])]))
    assert np.array_equal(positions, np.arange(log.layout["total_samples"]))
    params = log.final_params()
    assert params is not None and params.size == log.layout["parameters"]
    assert np.isfinite(params).all()
    assert len(log.evaluations) >= 1
