"""Launch real MPI jobs of `python -m mpips train` and read their logs.

Tests here run in a plain pytest process and start `mpiexec -n N` in a
subprocess, so a whole job (roles, windows, logs, exit codes) is exercised
exactly as a user runs it. `mpiexec --timeout` is a second net under
pytest-timeout: a hang ends as a failure, never as a stuck CI.
"""
from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass

import numpy as np
import pytest
import torch

from mpips.data import GlobalStream, WorkerShard, load_dataset
from mpips.log import RunLog
from mpips.models import build_model

from mpips.launch import MPI_ENV, MPIEXEC  # noqa: E402,F401


@dataclass
class Job:
    returncode: int
    output: str
    run_dir: str

    @property
    def log(self) -> RunLog:
        return RunLog(self.run_dir)


def mpiexec(n: int, args: list[str], *, timeout: float = 240, env: dict | None = None):
    """Run `mpiexec -n n python ARGS...`; returns the CompletedProcess (stdout+stderr)."""
    cmd = [MPIEXEC, "--timeout", str(int(timeout)), "-n", str(n), sys.executable, *args]
    full_env = {**os.environ, **MPI_ENV, **(env or {})}
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=full_env,
                          timeout=timeout + 30, text=True, errors="replace")


def train(n: int, run_dir, *flags: str, timeout: float = 240, check: bool = True) -> Job:
    """One training job of n ranks writing to run_dir; fails the test on a
    non-zero exit (with the job's output) when `check`."""
    p = mpiexec(n, ["-m", "mpips", "train", "--run-dir", str(run_dir), "--stall-timeout", "60",
                    *flags], timeout=timeout)
    out = p.stdout.replace("\x00", "")
    if check and p.returncode != 0:
        pytest.fail(f"job exited {p.returncode}:\n{out[-4000:]}")
    return Job(p.returncode, out, str(run_dir))


def assert_each_sample_once(log) -> None:
    """Under a global budget the logged claims cover the run's sample stream
    exactly: every position 0 .. total-1 once, none twice, none missed (so
    each training sample is used once per epoch: position k is sample
    perm_e[k mod N] of epoch e = k div N)."""
    it = log.iterations
    assert (it["sample"] >= 0).all(), "a batch without a claim"
    positions = np.sort(np.concatenate([np.arange(s, s + b) for s, b in zip(it["sample"], it["batch"])]))
    total = log.layout["total_samples"]
    assert len(positions) == total, f"{len(positions)} samples used, the budget is {total}"
    assert np.array_equal(positions, np.arange(total)), "a sample position claimed twice or missed"


@pytest.fixture
def run_dir(tmp_path):
    return tmp_path / "run"


def uneven_sgd_oracle(config, batches: np.ndarray) -> np.ndarray:
    """One process, SGD on the concatenation of the workers' batches each
    round; batches[r, i] = samples of worker i in round r (from the global
    stream, or from each worker's shard under `budget: per-worker`)."""
    data = load_dataset(config)
    torch.manual_seed(config.seed)
    model = build_model(config.model, data.input_shape, data.num_classes)
    opt = torch.optim.SGD(model.parameters(), lr=config.lr, momentum=config.momentum)
    workers = batches.shape[1]
    shards = [WorkerShard(data.x_train, data.y_train, i, workers, config.seed) for i in range(workers)]
    stream, position = GlobalStream(data.x_train, data.y_train, config.seed), 0
    for sizes in batches:
        if config.budget == "global":
            # a round's claims are the next sum(sizes) samples of the stream, in
            # some order: the mean over their concatenation does not depend on it
            parts = [stream.batch(position, int(sizes.sum()))]
            position += int(sizes.sum())
        else:
            parts = [shard.next_batch(int(n)) for shard, n in zip(shards, sizes)]
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(torch.cat([p[0] for p in parts])),
                                                 torch.cat([p[1] for p in parts]))
        loss.backward()
        opt.step()
    return torch.nn.utils.parameters_to_vector(model.parameters()).detach().numpy()
