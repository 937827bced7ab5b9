"""Launch real MPI jobs of `python -m mpips train` and read their logs.

Tests here run in a plain pytest process and start MPI jobs in a
subprocess, so a whole job (roles, windows, logs, exit codes) is exercised
as a user runs it: `mpips train` under mpiexec. A job expected to succeed
runs in the job pool (job_pool.py: one launch of 8 ranks for the session,
which imports torch once, not 5 times a job); one expected to fail, or
killed, or needing an environment of its own, is a launch of its own.
`mpiexec --timeout` and the pool's deadline are a second net under
pytest-timeout: a hang ends as a failure, never as a stuck CI.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass

import numpy as np
import pytest
import torch
from job_pool import JobPool, kill_job  # noqa: F401 (kill_job: the tests import it from here)

from mpips.experiments.launch import MPI_ENV, MPIEXEC  # noqa: E402,F401
from mpips.io.log import RunLog
from mpips.training.data import GlobalStream, WorkerShard, load_dataset
from mpips.training.models import build_model
from tests.oracles import assert_each_sample_once  # noqa: F401 (the tests import it from here)


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


POOL = JobPool(8, MPI_ENV)


@pytest.fixture(scope="session", autouse=True)
def job_pool():
    yield POOL
    POOL.stop()


def train(n: int, run_dir, *flags: str, timeout: float = 240, check: bool = True) -> Job:
    """One training job of n ranks writing to run_dir; fails the test on a
    non-zero exit (with the job's output) when `check`. A job that must
    succeed (`check`) runs in the job pool, one that may fail is launched."""
    argv = ["train", "--run-dir", str(run_dir), "--stall-timeout", "60", *flags]
    if check and n <= POOL.ranks:
        code, out = POOL.run(n, argv, timeout)
    else:
        p = mpiexec(n, ["-m", "mpips", *argv], timeout=timeout)
        code, out = p.returncode, p.stdout
    out = out.replace("\x00", "")
    if check and code != 0:
        pytest.fail(f"job exited {code}:\n{out[-4000:]}")
    return Job(code, out, str(run_dir))


def kill_training_when(n: int, run_dir, flags, ready, what: str, timeout: float = 120) -> None:
    """Start `mpips train` on n ranks into run_dir; once ready() (looked at
    every 20 ms), SIGKILL mpiexec and every rank (a node lost). Fails the
    test if the job ends first, or if `what` (what ready() waits for) does
    not come within `timeout`, or if the run finished before the kill."""
    cmd = [MPIEXEC, "-n", str(n), sys.executable, "-m", "mpips", "train", "--run-dir", str(run_dir),
           "--stall-timeout", "60", *flags]
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, **MPI_ENV})
    try:
        deadline = time.monotonic() + timeout
        while not ready():
            assert p.poll() is None, f"job ended ({p.returncode}) before the kill"
            assert time.monotonic() < deadline, f"no {what}"
            time.sleep(0.02)
    finally:
        kill_job(p)
    assert RunLog(str(run_dir)).status != "finished", "the job finished before the kill"


@pytest.fixture
def run_dir(tmp_path):
    return tmp_path / "run"


def uneven_sgd_oracle(config, batches: np.ndarray, dtype=torch.float32) -> np.ndarray:
    """One process, SGD on the concatenation of the workers' batches each
    round; batches[r, i] = samples of worker i in round r (from the global
    stream, or from each worker's shard under `budget: per-worker`). The
    paradigms' definition of a BSP round (docs/paradigms.md), computed in `dtype`."""
    data = load_dataset(config)
    torch.manual_seed(config.seed)
    model = build_model(config.model, data.input_shape, data.num_classes).to(dtype)
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
        loss = torch.nn.functional.cross_entropy(model(torch.cat([p[0] for p in parts]).to(dtype)),
                                                 torch.cat([p[1] for p in parts]))
        loss.backward()
        opt.step()
    return torch.nn.utils.parameters_to_vector(model.parameters()).detach().double().numpy()


def rounds_of(log) -> list[list[tuple[int, int, int, float]]]:
    """A synchronous run's rounds from its log: per clock, the pushes a
    server step applied, as (worker, stream start, batch, scale)."""
    it = log.iterations
    it = it[it["rejected"] == 0]
    return [[(int(r["worker"]), int(r["sample"]), int(r["batch"]), float(r["scale"]))
             for r in it[it["clock"] == c]] for c in range(int(it["clock"].max()) + 1)]


def even_rounds(config, sizes: np.ndarray) -> list[list[tuple[int, int, int, float]]]:
    """Rounds of a made-up run: sizes[r, i] samples for worker i in round r,
    claimed from the stream in worker order, pushes scaled b_i / X."""
    rounds, position = [], 0
    for row in sizes:
        X, pushes = int(row.sum()), []
        for i, b in enumerate(row):
            pushes.append((i, position if config.budget == "global" else -1, int(b), int(b) / X))
            position += int(b)
        rounds.append(pushes)
    return rounds


def replayed_run(config, rounds) -> np.ndarray:
    """A BSP/LB-BSP run's parameters, computed in one process the way the
    runtime computes them: each push's gradient on its batch (the workers'
    code path, one torch thread), scaled in float32, summed in the servers'
    order (by where the batch starts in the global stream, then by worker),
    and applied with the servers' optimizer. With the order of every float
    operation fixed, a real run must give these parameters bit for bit.
    `rounds`: rounds_of(log) or even_rounds(...)."""
    from mpips.training.flatmodel import FlatModel
    from mpips.training.optim import server_rule

    threads = torch.get_num_threads()
    torch.set_num_threads(1)   # as every rank (--torch-threads 1)
    try:
        data = load_dataset(config)
        torch.manual_seed(config.seed)
        flat = FlatModel(build_model(config.model, data.input_shape, data.num_classes))
        workers = config.workers or max(len(r) for r in rounds)
        shards = [WorkerShard(data.x_train, data.y_train, i, workers, config.seed) for i in range(workers)]
        stream = GlobalStream(data.x_train, data.y_train, config.seed)
        w = flat.flat_copy()
        opt = server_rule(config, w)
        loss_fn = torch.nn.CrossEntropyLoss()
        total = np.empty_like(w)
        for pushes in rounds:
            # each worker's shard is read in its own order: batches first, sum after
            grads = []
            for worker, start, b, scale in pushes:
                x, y = stream.batch(start, b) if start >= 0 else shards[worker].next_batch(b)
                flat.host_params[:] = w
                flat.zero_grad()
                loss_fn(flat.model(x), y).backward()
                flat.check_grad_views()
                grad = flat.host_grads.copy()
                if scale != 1.0:
                    grad *= scale
                grads.append(((start, worker), grad))
            for k, (_, grad) in enumerate(sorted(grads, key=lambda g: g[0])):
                if k == 0:
                    np.copyto(total, grad)
                else:
                    total += grad
            opt.step(total, config.lr)
        return w
    finally:
        torch.set_num_threads(threads)


def one_round_float_bound(config, batches: np.ndarray) -> np.ndarray:
    """Per parameter, an upper bound, from float analysis, of how far one round of the
    float32 runtime (replayed_run) may land from the exact SGD step on
    the concatenated batch, both from the same initial parameters.

    First-order rounding analysis (Higham, Accuracy and Stability, 3.1 and
    4.2): every float32 operation has relative error <= u = 2**-24. A
    gradient entry is a sum over the N samples of per-sample terms g_s, each
    the end of a chain of dot products (forward over each layer's fan-in,
    backward over its fan-out) and a few element-wise operations; a
    computed sum of n terms is off by at most gamma_n * sum |terms|, gamma_n
    = n u / (1 - n u). With n = N + every layer's fan-in and fan-out + 16
    (softmax, loss, scaling, the optimizer's multiply-adds), the computed
    gradient is within gamma_n * (1/N) sum_s |g_s| of the exact one, per
    entry, and the step moves it by lr times that, plus u |w_1| for
    rounding the new parameters. The per-sample |g_s| are computed in
    float64. Nothing here comes from observing runs.
    """
    data = load_dataset(config)
    torch.manual_seed(config.seed)
    model = build_model(config.model, data.input_shape, data.num_classes).double()
    workers = batches.shape[1]
    if config.budget == "global":
        parts = [GlobalStream(data.x_train, data.y_train, config.seed).batch(0, int(batches[0].sum()))]
    else:
        shards = [WorkerShard(data.x_train, data.y_train, i, workers, config.seed) for i in range(workers)]
        parts = [shard.next_batch(int(n)) for shard, n in zip(shards, batches[0])]
    x, y = torch.cat([p[0] for p in parts]).double(), torch.cat([p[1] for p in parts])
    N = len(y)
    abs_sum = torch.zeros(sum(p.numel() for p in model.parameters()), dtype=torch.float64)
    for s in range(N):
        model.zero_grad()
        torch.nn.functional.cross_entropy(model(x[s:s + 1]), y[s:s + 1]).backward()
        abs_sum += torch.cat([p.grad.reshape(-1) for p in model.parameters()]).abs()
    chain = sum(sum(m.weight.shape) for m in model.modules() if isinstance(m, torch.nn.Linear))
    n = N + chain + 16
    u = 2.0 ** -24
    gamma = n * u / (1 - n * u)
    w1 = uneven_sgd_oracle(config, batches[:1], torch.float64)
    return config.lr * gamma * abs_sum.numpy() / N + u * np.abs(w1)
