"""One implementation of the roles, two transports: the same job under
mpiexec (MPI windows, wall time) and under `mpips simulate` (in-process
arrays, virtual time). BSP's result does not depend on timing (a round's
pushes are summed in the order of their batches), so the two must agree bit
for bit; asynchronous paradigms are compared in benchmarks/sim_vs_mpi.py."""
import numpy as np
from conftest import train

from mpips.cli import main
from mpips.io.log import RunLog

FLAGS = ("--device-time", "20ms", "--slowdown", "1,1,2,4", "--epochs", "1", "--eval-every", "100",
         "--servers", "2")


def test_bsp_is_the_same_run_on_both_transports(tmp_path):
    """(LB-BSP is not: its batch sizes follow measured speeds, wall or virtual.)"""
    real = train(6, tmp_path / "mpi", "--paradigm", "bsp", *FLAGS).log
    assert main(["simulate", "--paradigm", "bsp", "--workers", "4", "--run-dir", str(tmp_path / "sim"),
                 *FLAGS]) == 0
    simulated = RunLog(str(tmp_path / "sim"))
    assert np.array_equal(real.final_params(), simulated.final_params())
    # the same rounds of the same batches (which worker took which batch of
    # a round is timing): by clock, then where the batch starts
    rows = [log.iterations[np.lexsort((log.iterations["sample"], log.iterations["clock"]))]
            for log in (real, simulated)]
    for column in ("clock", "sample", "batch"):
        assert np.array_equal(rows[0][column], rows[1][column])
    assert real.summary()["final_accuracy"] == simulated.summary()["final_accuracy"]
