"""Set-up that goes wrong on some ranks only: every rank hears of it, rank 0
names the rank, and a rank that never arrives is named within the stall
timeout; nothing hangs (each case is a launch of its own: a timeout aborts it)."""
from __future__ import annotations

import os
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ON_PATH = {"PYTHONPATH": os.pathsep.join([os.path.join(HERE, "inproc"), os.environ.get("PYTHONPATH", "")])}

PLUGIN_FAILING_ON_RANK_2 = """\
import os
from mpi4py import MPI
if MPI.COMM_WORLD.Get_rank() == 2:
    raise RuntimeError("this node lacks the plugin's library")
"""


def _launch(tmp_path, n, *flags, env=None):
    from conftest import mpiexec

    began = time.monotonic()
    p = mpiexec(n, ["-m", "mpips", "train", "--run-dir", str(tmp_path / "run"), "--epochs", "1", *flags],
                timeout=120, env=env)
    return p.returncode, p.stdout.replace("\x00", ""), time.monotonic() - began


def test_a_rank_stuck_in_set_up_is_named_within_the_stall_timeout(tmp_path):
    code, out, took = _launch(tmp_path, 4, "--model", "faulty_models:stuck_on_rank_2", "--stall-timeout", "10",
                              "--stall-warn", "2", env=ON_PATH)
    assert code != 0, out
    assert "rank(s) 2 did not arrive within 10s (stall_timeout)" in out, out
    assert "waiting" in out and "for rank(s) 2" in out, out     # the warning before it
    assert took < 90, (took, out)
    assert not (tmp_path / "run").exists(), "set-up failed before the run directory was made"


def test_a_rank_stopped_in_a_blocking_collective_ends_the_job_within_the_stall_timeout(tmp_path):
    # (MPI's own collectives, a window's allocation or a split, wait for every rank: a rank
    # stopped in the first seconds held the others there, silent, until killed from outside)
    code, out, took = _launch(tmp_path, 4, "--model", "faulty_models:stops_in_a_collective_on_rank_2",
                              "--stall-timeout", "10", env=ON_PATH)
    assert code == 2, out
    assert ("mpips: error: rank 0: set-up (the ranks of each node) did not complete within 10s (stall_timeout): "
            "a rank is stuck, stopped or gone") in out, out
    assert took < 90, (took, out)


def test_a_plugin_failing_on_one_rank_only_is_named_on_rank_0(tmp_path):
    plugin = tmp_path / "mine.py"
    plugin.write_text(PLUGIN_FAILING_ON_RANK_2)
    code, out, took = _launch(tmp_path, 4, "--plugin", str(plugin))
    assert code == 2, out
    lines = [line for line in out.splitlines() if line.startswith("mpips: error:")]
    assert len(lines) == 1 and lines[0].startswith("mpips: error: rank 2: plugin "), out
    assert "this node lacks the plugin's library" in lines[0], out
    assert "Traceback" not in out, out
