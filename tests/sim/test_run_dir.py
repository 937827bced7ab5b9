"""A run directory belongs to one run (mpips/io/rundir.py), shown with
`mpips simulate` (one process, the same set-up as an MPI job): a used
directory is refused unless --overwrite, which leaves none of the old run's
files; the same unfinished run starts again in place; a rank file of another
run is left out; a directory in use by a running job is refused."""
from __future__ import annotations

import os
import shutil
import signal
import threading

import h5py
import pytest

from mpips.cli import main
from mpips.io.log import RunLog
from mpips.io.rundir import RunDirLock
from mpips.runtime.roles.worker import Worker

SMALL = ["--epochs", "1", "--eval-every", "100"]


def simulate(run_dir, *flags: str) -> int:
    return main(["simulate", "--run-dir", str(run_dir), *SMALL, *flags])


def test_a_used_run_directory_is_refused_unless_overwritten(tmp_path, capsys):
    run = tmp_path / "run"
    assert simulate(run, "--workers", "4") == 0
    capsys.readouterr()
    assert simulate(run, "--workers", "2") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("mpips: error: invalid run_dir=") and "holds a ssp run, finished" in err[0]
    assert "--overwrite replaces it" in err[0]
    assert RunLog(str(run)).layout["workers"] == 4, "the refused job touched nothing"
    assert simulate(run, "--workers", "2", "--overwrite") == 0
    log = RunLog(str(run))
    assert sorted(p.name for p in run.glob("rank-*.h5")) == ["rank-0.h5", "rank-1.h5", "rank-2.h5"]
    assert log.completeness()["complete"] and log.summary()["samples"] == log.layout["total_samples"]


def test_the_same_unfinished_run_starts_again_in_place(tmp_path):
    """A requeued job that ended before its first checkpoint: no status, the same settings."""
    run = tmp_path / "run"
    assert simulate(run, "--workers", "4") == 0
    with h5py.File(run / "run.h5", "r+") as f:
        del f.attrs["status"]
    assert simulate(run, "--workers", "4") == 0
    with h5py.File(run / "run.h5", "r+") as f:
        del f.attrs["status"]
    assert simulate(run, "--workers", "4", "--seed", "1") == 2   # another run: refused


def test_files_of_a_run_without_run_h5_are_not_merged(tmp_path, capsys):
    run = tmp_path / "run"
    assert simulate(run, "--workers", "4") == 0
    (run / "run.h5").unlink()
    assert simulate(run, "--workers", "2") == 2
    assert "files of a run (rank-0.h5, ...)" in capsys.readouterr().err


def test_a_rank_file_of_another_run_is_left_out(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    assert simulate(a, "--workers", "4") == 0 and simulate(b, "--workers", "2") == 0
    shutil.copy(a / "rank-4.h5", b / "rank-4.h5")     # b has ranks 0..2
    log = RunLog(str(b))
    assert "not of this run" in log.files["rank-4.h5"]["problem"]
    assert log.completeness()["complete"], "a file run.h5 does not name is only left out"
    assert log.summary()["samples"] == log.layout["total_samples"]
    shutil.copy(a / "rank-2.h5", b / "rank-2.h5")     # one it names, replaced
    log = RunLog(str(b))
    assert not log.completeness()["complete"] and "rank-2.h5 not of this run" in log.completeness()["reason"]


def test_a_directory_in_use_is_refused_naming_the_holder(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    lock = RunDirLock(str(run))
    try:
        assert simulate(run, "--workers", "2") == 2
        err = capsys.readouterr().err
        assert "run_dir" in err and "in use by the job started" in err and "pid" in err
    finally:
        lock.release()
    assert simulate(run, "--workers", "2") == 0


@pytest.mark.parametrize("signum", [signal.SIGUSR1, signal.SIGTERM])
def test_a_simulation_stopped_by_a_signal_keeps_its_logs(tmp_path, signum, capsys, monkeypatch):
    """Its rows so far are written (SIGUSR1 lost every worker's), it says so,
    exit 128 + signal. In this process: the signal is sent once the workers
    have done some iterations (rows buffered, not yet flushed: by a count,
    not a time, which a loaded machine stretched past the 0.3 s this once
    slept), after `mpips simulate` took over the stop signals (and this
    test's own handler keeps one that came too early from ending pytest)."""
    run = tmp_path / "run"
    previous = signal.signal(signum, lambda *_: None)
    done = threading.Event()
    iteration = Worker.iteration

    def counted(self, it):
        iteration(self, it)
        if it >= 10:
            done.set()
    monkeypatch.setattr(Worker, "iteration", counted)

    def send():
        done.wait(120)
        os.kill(os.getpid(), signum)
    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    try:
        code = simulate(run, "--workers", "8", "--epochs", "200")
        # the burst's later ones change nothing, even as the process exits (put back, a
        # second USR1 0.05 s after the first killed `mpips simulate` with signal 10)
        ignored = signal.getsignal(signum) is signal.SIG_IGN
    finally:
        sender.join()
        signal.signal(signum, previous)
    err = capsys.readouterr().err
    assert code == 128 + signum and ignored, err
    name = signal.Signals(signum).name
    assert f"the simulation stopped on {name}; its logs so far are written" in err and "Traceback" not in err, err
    log = RunLog(str(run))
    assert len(log.iterations) > 0 and log.status == "incomplete"
