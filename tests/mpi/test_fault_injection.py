"""Fault injection into whole jobs: stop and continue a server, a preemption
signal during start-up, runs that cannot train, damaged run logs.
(Bad input: tests/mpi/inproc/test_bad_input.py; damaged checkpoints:
tests/unit/test_damaged_files.py.)"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import torch
from conftest import MPI_ENV, MPIEXEC, kill_job, train

from mpips.io.checkpoint import checkpoint_files
from mpips.io.log import RunLog
from mpips.training.models import build_model

SIGUSR1_BIT = 1 << (signal.SIGUSR1 - 1)


def _start(n: int, run_dir, *flags: str, tag: str) -> subprocess.Popen:
    """A job in the background; its ranks carry MPIPS_TEST_TAG=tag in their environment."""
    cmd = [MPIEXEC, "--timeout", "200", "-n", str(n), sys.executable, "-m", "mpips", "train",
           "--run-dir", str(run_dir), *flags]
    return subprocess.Popen(cmd, env={**os.environ, **MPI_ENV, "MPIPS_TEST_TAG": tag},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            errors="replace", start_new_session=True)


def _ranks(tag: str) -> dict[int, int]:
    """{world rank: pid} of the processes of the job tagged `tag`."""
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as fh:
                env = dict(kv.split(b"=", 1) for kv in fh.read().split(b"\0") if b"=" in kv)
        except OSError:
            continue
        if env.get(b"MPIPS_TEST_TAG") == tag.encode() and b"OMPI_COMM_WORLD_RANK" in env:
            found[int(env[b"OMPI_COMM_WORLD_RANK"])] = int(pid)
    return found


def _usr1_handled(pid: int) -> bool:
    """The process no longer dies of SIGUSR1 (caught or ignored)."""
    with open(f"/proc/{pid}/status") as fh:
        masks = dict(line.split(":", 1) for line in fh if line.startswith(("SigCgt", "SigIgn")))
    return any(int(m.strip(), 16) & SIGUSR1_BIT for m in masks.values())


def _lines(p: subprocess.Popen) -> list[str]:
    """The job's output, collected by a thread as it comes."""
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(p.stdout), daemon=True).start()
    return lines


def _output(p: subprocess.Popen, lines: list[str]) -> str:
    """The job's whole output, once it ended (killed if a check failed first)."""
    if p.poll() is None:
        kill_job(p)
    time.sleep(0.2)   # the reader thread takes the last lines
    return "".join(lines).replace("\x00", "")


def _wait_for(condition, what: str, timeout: float = 120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_usr1_during_start_up_checkpoints_exits_3_and_resumes(tmp_path):
    run = tmp_path / "run"
    p = _start(3, run, "--iterations", "30", "--budget", "per-worker", "--stall-timeout", "60",
               tag=f"usr1-{os.getpid()}")
    lines = _lines(p)
    try:
        ranks = _wait_for(lambda: (r := _ranks(f"usr1-{os.getpid()}")) and len(r) == 3
                          and all(_usr1_handled(pid) for pid in r.values()) and r, "the ranks to start")
        assert not (run / "run.h5").exists(), "sent during start-up (rank 0 writes run.h5 after it)"
        os.kill(p.pid, signal.SIGUSR1)   # as Slurm does: to mpirun, which passes it to every rank
        p.wait(timeout=200)
    finally:
        out = _output(p, lines)
    assert p.returncode == 3, out[-3000:]
    assert "checkpoint 1 (preemption)" in out and "preempted: exiting with status 3" in out
    assert len(checkpoint_files(str(run))) == 1
    assert RunLog(str(run)).status == "preempted"
    assert ranks  # (the ranks existed when the signal went)
    job = train(3, run, "--iterations", "30", "--budget", "per-worker")   # again: goes on from the checkpoint
    assert "resuming from" in job.output
    whole = job.log.completeness()
    assert whole["complete"], whole["reason"]
    assert whole["iterations_logged"] == {0: 30, 1: 30}


def test_a_stopped_server_is_named_and_the_job_goes_on_when_it_continues(tmp_path):
    tag = f"stop-{os.getpid()}"
    p = _start(3, tmp_path / "run", "--paradigm", "bsp", "--iterations", "300", "--slowdown", "10,10",
               "--stall-warn", "1", "--stall-timeout", "60", tag=tag)
    lines = _lines(p)
    try:
        _wait_for(lambda: any(line.startswith("mpips: bsp |") for line in lines), "training to start")
        time.sleep(0.5)
        server = _ranks(tag)[0]
        os.kill(server, signal.SIGSTOP)
        try:
            _wait_for(lambda: sum("waiting" in line for line in lines) >= 2, "stall warnings", 30)
        finally:
            os.kill(server, signal.SIGCONT)
        p.wait(timeout=200)
    finally:
        out = _output(p, lines)
    assert p.returncode == 0, out[-3000:]
    warnings = [line for line in out.splitlines() if ": waiting " in line and "gate at clock" in line]
    assert warnings, out[-3000:]
    for line in warnings:
        # the workers wait for the pushes they made to be applied: the server holds them up
        assert "for server 0 = rank 0 (applied " in line, line
        assert "worker 0 = rank" not in line and "worker 1 = rank" not in line, line


@pytest.mark.parametrize("victim", [0, 2], ids=["server", "worker"])
def test_a_killed_rank_ends_the_job_and_its_log_says_incomplete(tmp_path, victim):
    tag = f"kill-{victim}-{os.getpid()}"
    p = _start(3, tmp_path / "run", "--iterations", "3000", "--slowdown", "5,5", "--stall-timeout", "60",
               "--log-flush-seconds", "0.2", tag=tag)
    lines = _lines(p)
    try:
        _wait_for(lambda: any(line.startswith("mpips: ssp |") for line in lines), "training to start")
        time.sleep(1.0)
        os.kill(_ranks(tag)[victim], signal.SIGKILL)
        start = time.monotonic()
        p.wait(timeout=100)
        assert time.monotonic() - start < 60   # ended, not left waiting for the stall timeout
    finally:
        out = _output(p, lines)
    assert p.returncode != 0
    assert "signal 9" in out or "killed" in out.lower(), out[-3000:]
    s = json.loads(_info(str(tmp_path / "run"), "--json").stdout)
    assert s["complete"] is False and s["reason"].startswith("status incomplete"), s["reason"]


def _initial_params() -> np.ndarray:
    torch.manual_seed(0)
    model = build_model("mlp", (1, 8, 8), 10)
    return torch.nn.utils.parameters_to_vector(model.parameters()).detach().numpy()


def test_a_run_whose_pushes_are_all_rejected_fails_without_moving_the_parameters(tmp_path):
    nan_at = ",".join(f"{w}:{i}" for w in range(2) for i in range(6))
    # momentum and weight decay would move the parameters with a zero gradient
    job = train(3, tmp_path / "run", "--paradigm", "bsp", "--iterations", "6", "--budget", "per-worker",
                "--nan-at", nan_at, "--weight-decay", "0.1", check=False)
    assert job.returncode == 1, job.output[-3000:]
    errors = [line for line in job.output.splitlines() if line.startswith("mpips: error:")]
    assert len(errors) == 1 and "all 12 pushes were rejected" in errors[0], job.output[-3000:]
    assert "Traceback" not in job.output
    log = job.log
    assert log.status == "failed"
    s = log.summary()
    assert not s["complete"] and "status failed" in s["reason"]
    assert s["updates"] == 0 and len(log.applies) == 0
    assert len(log.events("skipped_step")) == 6
    assert np.array_equal(log.final_params(), _initial_params())


def test_no_step_without_a_gradient_when_some_pushes_are_rejected(tmp_path):
    # BSP with one worker: one push per step; pushes 2 and 3 rejected
    job = train(2, tmp_path / "run", "--paradigm", "bsp", "--iterations", "8", "--budget", "per-worker",
                "--nan-at", "0:2,0:3", "--weight-decay", "0.1")
    assert "2 of 8 pushes were rejected" in job.output
    log = job.log
    assert log.summary()["updates"] == 6 and len(log.applies) == 6
    assert [e["total_pushes"] for e in log.events("skipped_step")] == [3, 4]
    assert log.summary()["complete"]


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """One small finished run, copied by each test that damages it."""
    return train(3, tmp_path_factory.mktemp("fin") / "run", "--iterations", "40", "--budget", "per-worker",
                 "--log-flush-seconds", "0.2").run_dir


def _info(run_dir: str, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mpips", "info", run_dir, *flags], capture_output=True,
                          text=True, timeout=60)


@pytest.mark.parametrize("damage", ["truncate 500", "truncate 10000", "delete"])
def test_a_damaged_rank_file_is_named_within_seconds(finished_run, tmp_path, damage):
    run = str(tmp_path / "run")
    shutil.copytree(finished_run, run)
    victim = os.path.join(run, "rank-1.h5")
    if damage == "delete":
        os.remove(victim)
    else:
        os.truncate(victim, int(damage.split()[1]))
    start = time.monotonic()
    p = _info(run)
    assert time.monotonic() - start < 20   # not minutes of HDF5's SWMR retries
    assert p.returncode == 1
    warnings = [line for line in p.stderr.splitlines() if line.startswith("mpips: warning:")]
    assert len(warnings) == 1 and "rank-1.h5 " + ("missing" if damage == "delete" else "truncated") in warnings[0]
    assert "Traceback" not in p.stderr
    p = _info(run, "--json")
    s = json.loads(p.stdout)
    assert s["complete"] is False and "rank-1.h5" in s["reason"]
    assert "iterations logged of workers 0 (0 of 40)" in s["reason"]
    assert s["files"]["rank-1.h5"]["present"] == (damage != "delete")
    assert s["files"]["rank-2.h5"] == {"present": True, "problem": "",
                                       "rows": {"iterations": 40, "applies": 0, "evaluations": 0,
                                                "events": 0, "exchanges": 0, "pushes": 0}}
    start = time.monotonic()
    p = subprocess.run([sys.executable, "analysis/summarize.py", run], capture_output=True, text=True,
                       timeout=60, cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    assert time.monotonic() - start < 20
    assert "summarize: damaged run log" in p.stderr and "rank-1.h5" in p.stderr


def test_a_whole_run_is_complete(finished_run):
    p = _info(finished_run, "--json")
    assert p.returncode == 0
    s = json.loads(p.stdout)
    assert s["complete"] is True and s["reason"] == ""
    assert s["iterations_promised"] == 40 and s["iterations_logged"] == {"0": 40, "1": 40}


def test_a_whole_run_under_the_global_budget_is_complete(tmp_path):
    run = train(3, tmp_path / "run", "--iterations", "20", "--budget", "global").run_dir
    s = json.loads(_info(run, "--json").stdout)
    assert s["complete"] is True and s["reason"] == ""
    assert s["samples_promised"] == s["samples_logged"] == 20 * 2 * 16


def _flood(p: subprocess.Popen, signum: int, every: float, pids=None) -> threading.Thread:
    """Send `signum` to mpirun (or to `pids`) every `every` seconds until the job ends."""
    def send():
        while p.poll() is None:
            for pid in pids or [p.pid]:
                try:
                    os.kill(pid, signum)
                except ProcessLookupError:
                    pass
            time.sleep(every)
    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    return thread


def test_usr1_in_bursts_gives_one_checkpoint_and_exit_3_never_a_signal(tmp_path):
    """USR1 every 20 ms from mid-run to the job's last breath (Slurm's preemption and
    time limit come in bursts): one checkpoint, exit 3; the ones during the
    shutdown change nothing (they killed ranks with signal 10: exit 138, not requeued)."""
    tag = f"burst-{os.getpid()}"
    run = tmp_path / "run"
    p = _start(3, run, "--paradigm", "bsp", "--epochs", "20", "--device-time", "10ms", "--stall-timeout", "60",
               tag=tag)
    lines = _lines(p)
    try:
        _wait_for(lambda: (run / "rank-2.h5").exists(), "training")
        _flood(p, signal.SIGUSR1, 0.02)
        p.wait(timeout=200)
    finally:
        out = _output(p, lines)
    assert p.returncode == 3, out[-3000:]
    assert out.count("preempted: exiting with status 3") == 1 and "signal" not in out.lower(), out[-3000:]
    assert len(checkpoint_files(str(run))) == 1


def test_usr1_after_the_run_finished_exits_0(tmp_path):
    tag = f"late-{os.getpid()}"
    run = tmp_path / "run"
    p = _start(3, run, "--paradigm", "bsp", "--epochs", "2", "--stall-timeout", "60", tag=tag)
    lines = _lines(p)
    try:
        _wait_for(lambda: any("epoch  2.00" in line for line in lines), "the last evaluation")
        _flood(p, signal.SIGUSR1, 0.01)
        p.wait(timeout=200)
    finally:
        out = _output(p, lines)
    assert p.returncode in (0, 3), out[-3000:]     # 3: a signal that came before the servers finished
    assert "signal" not in out.lower(), out[-3000:]
    assert RunLog(str(run)).status == ("finished" if p.returncode == 0 else "preempted")


def test_sigterm_checkpoints_says_so_and_exits_143_without_requeue(tmp_path):
    """SIGTERM to the ranks, as Slurm's scancel and time limit send to every
    process of a step (under srun; Open MPI's mpirun, signalled itself, kills
    its ranks at once: the job scripts turn its SIGTERM into USR1)."""
    tag = f"term-{os.getpid()}"
    run = tmp_path / "run"
    flags = ["--paradigm", "bsp", "--epochs", "20", "--device-time", "10ms", "--stall-timeout", "60"]
    p = _start(3, run, *flags, tag=tag)
    lines = _lines(p)
    try:
        _wait_for(lambda: (run / "rank-2.h5").exists(), "training")
        for pid in _ranks(tag).values():
            os.kill(pid, signal.SIGTERM)
        p.wait(timeout=200)
    finally:
        out = _output(p, lines)
    assert p.returncode == 143, out[-3000:]
    assert "stopped by SIGTERM: exiting with status 143 (not requeued)" in out, out[-3000:]
    assert len(checkpoint_files(str(run))) == 1 and RunLog(str(run)).status == "preempted"
    job = train(3, run, *flags)   # the same job again resumes from it
    assert "resuming from" in job.output and job.log.completeness()["complete"]


def test_a_stopped_evaluator_is_named_and_the_training_kept(tmp_path):
    """A rank stopped mid-run (SIGSTOP: a node swapping, a debugger, a cgroup
    freeze) loses no trained work: the end of the run names it within the stall
    timeout, and server 0 has saved the final parameters and the status."""
    tag = f"evaluator-{os.getpid()}"
    run = tmp_path / "run"
    p = _start(4, run, "--paradigm", "bsp", "--epochs", "10", "--device-time", "10ms", "--evaluator",
               "--eval-every", "0.5", "--stall-timeout", "10", "--stall-warn", "2", tag=tag)
    lines = _lines(p)
    stopped = None
    try:
        # training, not set-up: the logs open before the windows are allocated, and a rank stopped
        # inside that collective (MPI_Win_allocate) holds every rank there, beyond any timeout of ours
        _wait_for(lambda: any(line.startswith("mpips: epoch") for line in lines), "training: a first evaluation")
        stopped = _ranks(tag)[3]
        os.kill(stopped, signal.SIGSTOP)
        began = time.monotonic()
        p.wait(timeout=150)
        took = time.monotonic() - began
    finally:
        out = _output(p, lines)
        if stopped is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(stopped, signal.SIGKILL)
    assert p.returncode == 1, out[-3000:]
    assert "the end of the run: rank(s) 3 (evaluator 0) did not arrive within 10s" in out, out[-3000:]
    assert took < 90, (took, out[-3000:])
    log = RunLog(str(run))
    assert log.status == "finished" and "3 (evaluator 0) did not finish" in log.status_reason
    params = log.final_params()
    assert params is not None and np.isfinite(params).all()
    assert log.completeness()["complete"], log.completeness()
