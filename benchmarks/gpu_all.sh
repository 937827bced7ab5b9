#!/usr/bin/env bash
# Every GPU measurement, in one call on a lent GPU machine (one NVIDIA GPU, 16 cores):
#
#   bash benchmarks/gpu_all.sh OUT [SECONDS]
#
# tests/mpi/test_cuda.py; benchmarks/gpu_lbbsp.py (LB-BSP's batch sizes on a GPU);
# benchmarks/gpu.py --workload mnist1d; then, with a core per rank, the MPI side of
# the MNIST-1D cross-check of the simulator for BSP and LB-BSP (benchmarks/sim_vs_mpi.py
# --only mpi; tabulate here with --reuse). Results and logs go to OUT; steps that would
# not end within SECONDS are skipped. Where python3 lacks mpi4py, Open MPI or mnist1d,
# wheels in .whl/ are installed beside the machine's own packages (its CUDA build of
# torch). Render afterwards: gpu_lbbsp.py --render, gpu.py --render.
# DRY=1: a dry run of this script on a CPU (every step short).
set -u
OUT=$1
BUDGET=${2:-520}
began=$SECONDS
left() { echo $((BUDGET - (SECONDS - began))); }
PY=$(command -v "${PY:-python3}")
PY=$(cd "$(dirname "$PY")" && pwd)/$(basename "$PY")   # absolute: the steps run from benchmarks/
if ! $PY -c "import mpi4py, mnist1d" 2>/dev/null && [ -d .whl ]; then
    # into python3's own environment: mpips finds mpiexec beside the interpreter
    $PY -m pip install -q --no-index --no-deps .whl/*.whl || exit 1
fi
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 MPIPS_CACHE=/tmp/mpips-cache
KEEP=/tmp/gpu-all-logs
mkdir -p "$OUT" $KEEP
DRY=${DRY:+--quick --device cpu --train 4000}
SCALE=${DRY:+--epochs-scale 0.02}
nvidia-smi > "$OUT/test_cuda.txt" 2>&1
$PY -m pytest -q -p no:cacheprovider -p no:pytest_mpi tests/mpi/test_cuda.py >> "$OUT/test_cuda.txt" 2>&1
echo "test_cuda: rc $? at $((SECONDS - began)) s"
cd benchmarks
$PY gpu_lbbsp.py $DRY --progress "$OUT/lbbsp.json" --keep $KEEP/lbbsp --deadline $(( $(left) - 300 )) > "$OUT/lbbsp.log" 2>&1
echo "gpu_lbbsp: rc $? at $((SECONDS - began)) s"
if [ "$(left)" -gt 160 ]; then
    $PY gpu.py $DRY --workload mnist1d --progress "$OUT/mnist1d.json" > "$OUT/mnist1d.log" 2>&1
    echo "gpu mnist1d: rc $? at $((SECONDS - began)) s"
fi
if [ "$(left)" -gt 150 ]; then   # two jobs of 6 ranks at once: a core per rank
    for paradigm in bsp lbbsp; do
        timeout $(( $(left) - 10 )) $PY sim_vs_mpi.py --workload mnist1d --workers 4 --slowdown 1,1,2.06,2.06 \
            --device-time 10ms --paradigms $paradigm --only mpi --keep $KEEP/crosscheck $SCALE >> "$OUT/crosscheck.log" 2>&1 &
    done
    wait
    echo "crosscheck: at $((SECONDS - began)) s"
fi
tar czf "$OUT/logs.tar.gz" -C $KEEP .
