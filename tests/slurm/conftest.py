"""A real single-node Slurm cluster for the tests in this directory
(tests/slurm_cluster.py).

The session fixture `slurm` installs Debian's Slurm if it is missing (root
only), starts `slurmctld` and `slurmd` on this host with a configuration of
their own, and stops both at the end.

    def test_x(slurm, tmp_path):
        job = slurm.submit(script_path, env={"MPIPS_EPOCHS": "1"}, cwd=tmp_path)
        assert slurm.wait(job, timeout=60) == "COMPLETED", slurm.describe(job)
"""
from __future__ import annotations

import os
import shutil
import socket
import sys
import tempfile
from pathlib import Path

import pytest

from tests.slurm_cluster import SlurmCluster, SlurmNode, slurm_installed, wait_for_line

REPO = Path(__file__).resolve().parents[2]
__all__ = ["wait_for_line"]


@pytest.fixture(scope="session")
def slurm():
    slurm_installed()
    node = socket.gethostname().split(".")[0]
    root = Path(tempfile.mkdtemp(prefix="mpips-slurm-"))
    cluster = SlurmCluster(root, [SlurmNode(node, "127.0.0.1")])
    try:
        cluster.start()
    except RuntimeError as e:
        cluster.stop()
        pytest.fail(f"could not start Slurm: {e}", pytrace=False)
    yield cluster
    cluster.stop()
    if not os.environ.get("MPIPS_KEEP_SLURM_DIR"):
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def venv_python() -> str:
    py = REPO / ".venv" / "bin" / "python"
    return str(py) if py.exists() else sys.executable
