"""`mpips train`: agree on the set-up on every rank, then run this rank's
role over MPI (mpi_transport.py) with the one assembler (assemble.py)."""
from __future__ import annotations

import contextlib
import copy
import os
import sys
import time

import numpy as np
import torch

from ..config import Config, ConfigError
from ..io.checkpoint import CheckpointError, find_resume, run_attrs
from ..io.checkpoint import identity as checkpoint_identity
from ..io.log import DiskFull, RankLog, rank_file, set_status
from ..io.rundir import RunDirLock, claim, new_run_id
from ..training.data import DataError
from ..training.flatmodel import FlatModel
from .assemble import (TrainingFailed, announce, default_run_dir, judge_training, make_plan, own_run_dir, prepare, run,
                       versions, workload)
from .checkpointer import Checkpointer, DiskFullAtCheckpoint, Preempted
from .layout import EVALUATOR, WORKER, make_layout
from .mpi_transport import Collectives, MPITransport
from .wait import precise_sleeps


class SetupError(Exception):
    """Bad input found while setting up; every rank raises it with the same
    one-line message, so the job ends cleanly instead of aborting."""


def _agree(comm: Collectives, config: Config, what: str, fn):
    """Run fn() on every rank; if any rank fails with bad input, all raise
    SetupError with the first failing rank's message (naming it when others
    did not fail). A rank that does not arrive within the stall timeout is
    named (SetupTimeout)."""
    try:
        result, err = fn(), None
    except (ConfigError, DataError, CheckpointError, OSError) as e:
        result, err = None, str(e)
    errors = exchange(comm, config, what, err)
    failed = [r for r, e in enumerate(errors) if e]
    if failed:
        # named when a rank but 0 met it alone (rank 0 prints the line; steps of its own are many)
        raise SetupError(errors[failed[0]] if len(failed) == len(errors) or failed[0] == 0
                         else f"rank {failed[0]}: {errors[failed[0]]}")
    return result


def exchange(comm: Collectives, config: Config, what: str, value) -> list:
    """Every rank's `value` on every rank, within the stall timeout (mpips/runtime/rendezvous.py)."""
    return comm.allgather(value, what=f"set-up ({what})", warn=config.stall_warn, timeout=config.stall_timeout)


def _same_job_everywhere(comm: Collectives, config: Config, data, model) -> None:
    """Every rank runs the same job: the same settings, the same parameter
    shapes, the same data shapes. A rank that differs (a model factory or
    data that depend on the rank) sizes its one-sided offsets from its own
    count, so its pushes land in other workers' slots, and the run trains
    garbage and reports success. SetupError on every rank, naming the ranks."""
    mine = {"settings": config.to_dict(),
            "model": [tuple(p.shape) for p in model.parameters()],
            "data": [tuple(data.x_train.shape), tuple(data.x_test.shape), data.num_classes]}
    everyone = exchange(comm, config, "comparing the ranks' jobs", mine)
    # (the data first: a model is built from their shapes)
    for key, what in (("settings", "settings"), ("data", "data's shapes (training, test, classes)"),
                      ("model", "model's parameter shapes")):
        differ = [r for r, theirs in enumerate(everyone) if theirs[key] != everyone[0][key]]
        if not differ:
            continue
        if key == "settings":
            fields = sorted(k for k in mine[key] if everyone[differ[0]][key].get(k) != everyone[0][key].get(k))
            shown = ", ".join(f"{k}={everyone[differ[0]][key].get(k)!r} against {everyone[0][key].get(k)!r}"
                              for k in fields[:3])
        elif key == "model":
            count = [sum(int(np.prod(s)) for s in everyone[r][key]) for r in (differ[0], 0)]
            shown = f"{count[0]} parameters against rank 0's {count[1]}"
        else:
            shown = f"{everyone[differ[0]][key]} against rank 0's {everyone[0][key]}"
        raise SetupError(f"ranks disagree on the {what}: rank(s) {', '.join(map(str, differ))} "
                         f"({shown}); every rank must build the same job")


def resume_or_claim(run_dir: str, config: Config, ident: dict, ranks: int):
    """The checkpoint to resume from, if the directory holds one of this run
    (never with --overwrite); else the directory is claimed for a fresh start."""
    found = None if config.overwrite else find_resume(run_dir, ident, ranks)
    if found is None:
        claim(run_dir, config.to_dict(), overwrite=config.overwrite)
    return found


def gpu_index(wants_gpu: list[bool], local_rank: int, gpus: int) -> int:
    """The GPU of a node's rank `local_rank`: the node's ranks that use one
    (`wants_gpu`, in local rank order) take the `gpus` it sees in turn, one
    each when there are enough, shared round-robin when not."""
    return sum(wants_gpu[:local_rank]) % gpus


def _device(config: Config, transport: MPITransport, *, wants_gpu: bool) -> torch.device:
    """This rank's device (under Slurm's per-task GPU binding each rank sees its own one)."""
    users, local_rank = transport.on_this_node(wants_gpu)
    if not wants_gpu or config.device == "cpu" or (config.device == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise ConfigError("device", "cuda", "no CUDA device visible to this rank; use cpu or auto")
    return torch.device("cuda", gpu_index(users, local_rank, torch.cuda.device_count()))


def warm_up(flat: FlatModel, data, batch_size: int, loss=None) -> None:
    """One forward/backward on a copy of the model, before the clock starts.
    torch initializes lazily at a process's first backward: on a CUDA build
    of torch, even on the CPU, a worker's first iteration took 110-290 ms, an
    overrun of its emulated device time in every worker of every job
    (benchmarks/results/sim_vs_mpi.md). A copy, under a forked random
    state: the run's parameters, gradients and random numbers stay as they are."""
    model = copy.deepcopy(flat.model)
    cuda = [flat.device.index or 0] if flat.device.type == "cuda" else []
    with torch.random.fork_rng(devices=cuda):
        x, y = data.x_train[:batch_size].to(flat.device), data.y_train[:batch_size].to(flat.device)
        (loss or torch.nn.CrossEntropyLoss())(model(x), y).backward()


def train(config: Config, comm=None, *, model=None, dataset=None, loss=None) -> str:
    """Run one training job over `comm` (COMM_WORLD by default); returns the
    run directory. `model`, `dataset` (a data.Dataset), `loss`: a user's
    objects (mpips.train)."""
    held: list[RunDirLock] = []   # the run directory's lock, rank 0's, however the job ends
    try:
        return _train(config, MPITransport(comm), model, dataset, loss, held)
    finally:
        for lock in held:
            lock.release()


def _train(config: Config, transport: MPITransport, model, dataset, loss, held: list) -> str:
    torch.set_num_threads(config.torch_threads)
    precise_sleeps()
    comm = transport.collectives
    transport.stall = (config.stall_warn, config.stall_timeout)
    rank, size = comm.rank, comm.size
    layout = _agree(comm, config, "the layout", lambda: make_layout(config, size))
    config = config.with_workers(layout.workers)
    role, index = layout.role(rank)

    run_dir = comm.bcast(config.run_dir or default_run_dir(config) if rank == 0 else None)
    config.run_dir = run_dir

    user_model = model
    data, model, paradigm, ipe = _agree(comm, config, "reading the data, building the model",
                                        lambda: prepare(config, layout, model=model, dataset=dataset))
    _same_job_everywhere(comm, config, data, model)
    lock = _agree(comm, config, "the run directory",     # last: bad input leaves none
                  lambda: own_run_dir(run_dir) if rank == 0 else None)
    if lock is not None:
        held.append(lock)
    # Collective on every rank (it splits a node-local communicator); workers and the
    # evaluator compute on GPUs, servers apply on the CPU beside their windows.
    device = _agree(comm, config, "the devices",
                    lambda: _device(config, transport, wants_gpu=role in (WORKER, EVALUATOR)))
    flat = FlatModel(model, device)
    if role == WORKER:
        warm_up(flat, data, config.batch_size, loss)
    plan = make_plan(config, layout, paradigm, len(data.y_train), ipe, flat.n, loss)
    # A run directory holding a checkpoint of this run: go on from it (mpips/runtime/checkpointer.py).
    ident = checkpoint_identity(config, layout, flat.n, plan.iterations)
    found = _agree(comm, config, "looking for a checkpoint",
                   lambda: resume_or_claim(run_dir, config, ident, size) if rank == 0 else None)
    checkpointer = Checkpointer(comm, run_dir, config, ident, found)
    segment = checkpointer.segment
    # a resumed run keeps its id (older run logs have none: a new one)
    run_id = comm.bcast((run_attrs(run_dir).get("run_id") if found else None) or new_run_id() if rank == 0 else None)
    transport.clock.origin = comm.bcast(time.time() if rank == 0 else None)
    stopped, counts = None, (0, 0)
    with _full_disk_ends_job(transport, run_dir):
        transport.comm.Barrier()  # run_dir exists before anyone opens a file in it
        log = RankLog(rank_file(run_dir, rank, segment), rank, flush_seconds=config.log_flush_seconds,
                      segment=segment, writers=size, run_id=run_id)
        if rank == 0:
            announce(plan, segment, versions(transport.library()), workload(config, data, user_model, model),
                     run_id=run_id)
        try:
            counts = run(transport, plan, {rank: log}, {rank: checkpointer}, {rank: flat}, data)
        except (Preempted, DiskFullAtCheckpoint) as e:
            stopped = e  # every rank stopped after the same checkpoint: end cleanly, then say so
        except BaseException:
            with contextlib.suppress(DiskFull):   # the job reports what failed first
                log.close()
            checkpointer.close()
            raise
        log.close()
    transport.comm.Barrier()   # every rank's log is whole before run.h5 says `finished`
    checkpointer.close()
    transport.close()
    if isinstance(stopped, Preempted):
        raise stopped
    failure = str(stopped) if stopped else ""
    why = comm.bcast(judge_training(run_dir, *counts, failure=failure) if rank == 0 else None)
    if why:
        raise TrainingFailed(why)
    return run_dir


@contextlib.contextmanager
def _full_disk_ends_job(transport: MPITransport, run_dir: str):
    """A write of this rank's alone (its log, run.h5) found the disk full
    while the others train, or wait for it: every rank ends (an abort;
    its log's file left as it is, see RankLog.close) with one line, said by
    the first rank that failed (one that failed meanwhile gives it time to
    go out), and run.h5 says `failed` if it can still be written (else
    its status stays absent: the reader's `incomplete`)."""
    try:
        yield
    except DiskFull as e:
        if transport.first_to_fail():
            print(f"mpips: error: {e}", file=sys.stderr, flush=True)
            if os.path.exists(os.path.join(run_dir, "run.h5")):   # (none before rank 0's header)
                with contextlib.suppress(OSError):
                    set_status(run_dir, "failed", str(e))
        else:
            time.sleep(1)
        transport.abort(1)
