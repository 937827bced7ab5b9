import os

import pytest

# One torch thread per process: tests share two cores with MPI ranks.
os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture
def srun_on_path(tmp_path, monkeypatch):
    """A program named srun first on PATH: a launcher is refused unless it can be started."""
    srun = tmp_path / "bin" / "srun"
    srun.parent.mkdir()
    srun.write_text("#!/bin/sh\n")
    srun.chmod(0o755)
    monkeypatch.setenv("PATH", f"{srun.parent}{os.pathsep}{os.environ.get('PATH', '')}")
