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
this flavour is about. The jobs run one after another in one launch of
that MPI (tests/job_pool.py: its ranks import torch once).
"""
from __future__ import annotations

import os

import numpy as np
import pytest
from job_pool import JobPool

from mpips.experiments.launch import MPI_ENV
from mpips.io.log import RunLog

FLAVOR = os.environ.get("MPIPS_PORTABILITY", "")
TIMEOUT = 120
ITERATIONS = 6

FLAVORS = {   # the launch's environment, the library the log must name
    "mpich": ({}, "MPICH"),
    "ompi-tcp": ({**MPI_ENV, "OMPI_MCA_osc": "rdma", "OMPI_MCA_btl": "tcp,self"}, "Open MPI"),
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


@pytest.fixture(scope="module")
def pool():
    pool = JobPool(max(job[1] for job in JOBS), FLAVORS[FLAVOR][0])
    yield pool
    pool.stop()


@pytest.mark.parametrize("name,ranks,workers,flags", JOBS, ids=[j[0] for j in JOBS])
def test_short_job_ends_with_a_complete_log(pool, tmp_path, name, ranks, workers, flags):
    library = FLAVORS[FLAVOR][1]
    run = tmp_path / "run"
    code, out = pool.run(ranks, ["train", "--run-dir", str(run), "--iterations", str(ITERATIONS),
                                 "--stall-timeout", "60", *flags], TIMEOUT)
    assert code == 0, f"{FLAVOR} {name}: exit {code}\n{out[-3000:]}"
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
