"""`mpips train`: agree on the set-up on every rank, then run this rank's
role over MPI (mpi_transport.py) with the one assembler (assemble.py)."""
from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
import time
from typing import Any

import numpy as np
import torch

from ...config import Config, ConfigError
from ...io.checkpoint import CheckpointError
from ...io.checkpoint import identity as checkpoint_identity
from ...io.log import DiskFull, RankLog
from ...io.rundir import RunDir, default_run_dir, new_run_id
from ...training.data import DataError
from ...training.flatmodel import FlatModel, rank_device, warm_up
from ...training.models import workload
from ..layout import EVALUATOR, WORKER, make_layout, roles_note
from ..placement import placed_order
from ..recovery.checkpointer import Checkpointer, DiskFullAtCheckpoint, Preempted
from ..transport.mpi import MPITransport
from ..transport.protocols import EveryRank
from ..transport.wait import precise_sleeps
from .assemble import TrainingFailed, announce, judge_training, make_plan, prepare, setup_phase, versions
from .assemble import run as run_job


class SetupError(EveryRank):
    """Bad input found while setting up; every rank raises it with the same
    one-line message, so the job ends cleanly instead of aborting."""


def _agree(comm: MPITransport, what: str, fn):
    """Run fn() on every rank; if any rank fails with bad input, all raise
    SetupError with the first failing rank's message (naming it when others
    did not fail). A rank that does not arrive within the stall timeout is
    named (SetupTimeout)."""
    try:
        result, err = fn(), None
    except (ConfigError, DataError, CheckpointError, OSError) as e:
        result, err = None, str(e)
    errors = comm.allgather(err, what=f"set-up ({what})")
    failed = [r for r, e in enumerate(errors) if e]
    if failed:
        # named when a rank but 0 met it alone (rank 0 prints the line; steps of its own are many)
        raise SetupError(errors[failed[0]] if len(failed) == len(errors) or failed[0] == 0
                         else f"rank {failed[0]}: {errors[failed[0]]}")
    return result


def _same_job_everywhere(comm: MPITransport, config: Config, data, model) -> None:
    """Every rank runs the same job: the same settings, the same parameter
    shapes, the same data shapes. A rank that differs (a model factory or
    data that depend on the rank) sizes its one-sided offsets from its own
    count, so its pushes land in other workers' slots, and the run trains
    garbage and reports success. SetupError on every rank, naming the ranks."""
    mine: dict[str, Any] = {"settings": config.to_dict(),
            "model": [tuple(p.shape) for p in model.parameters()],
            "data": [tuple(data.x_train.shape), tuple(data.x_test.shape), data.num_classes]}
    everyone = comm.allgather(mine, what="set-up (comparing the ranks' jobs)")
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


def train(config: Config, comm=None, *, model=None, dataset=None, loss=None) -> str:
    """Run one training job over `comm` (COMM_WORLD by default); returns the
    run directory. `model`, `dataset` (a data.Dataset), `loss`: a user's
    objects (mpips.train). What the job holds (the transport and its
    windows, the run directory and its lock, the checkpointer) is in one
    ExitStack, released however the job ends (MPITransport: the windows
    collectively only when every rank ends alike)."""
    with contextlib.ExitStack() as job:
        transport = job.enter_context(MPITransport(comm, warn=config.stall_warn, timeout=config.stall_timeout,
                                                      order=lambda hosts: placed_order(config, hosts)))
        return _train(config, transport, model, dataset, loss, job)


def _train(config: Config, transport: MPITransport, model, dataset, loss, job: contextlib.ExitStack) -> str:
    torch.set_num_threads(config.torch_threads)
    precise_sleeps()
    rank, size = transport.rank, transport.size
    layout = _agree(transport, "the layout", lambda: make_layout(config, size))
    transport.name_ranks(layout.placement(transport.hosts))
    if rank == 0 and roles_note(layout, derived=not config.workers):
        print(roles_note(layout, derived=True), file=sys.stderr, flush=True)
    config = config.with_workers(layout.workers)
    role, index = layout.role(rank)
    setup_phase(config, rank, "reading the data and building the model")

    path = transport.bcast(config.run_dir or default_run_dir(config) if rank == 0 else None)
    config = dataclasses.replace(config, run_dir=path)

    user_model = model
    data, model, paradigm, epoch_iterations = _agree(transport, "reading the data, building the model",
                                                     lambda: prepare(config, layout, model=model, dataset=dataset))
    _same_job_everywhere(transport, config, data, model)
    # rank 0 locks it, last: bad input leaves no directory
    run = job.enter_context(_agree(transport, "the run directory",
                                   lambda: RunDir.open(path) if rank == 0 else RunDir(path)))
    # Collective on every rank (it splits a node-local communicator); workers and the
    # evaluator compute on GPUs, servers apply on the CPU beside their windows.
    device = _agree(transport, "the devices",
                    lambda: rank_device(config, role in (WORKER, EVALUATOR),
                                        *transport.on_this_node(role in (WORKER, EVALUATOR))))
    flat = FlatModel(model, device)
    setup_phase(config, rank, "warming up the workers, allocating the windows")
    if role == WORKER:
        warm_up(flat, data, config.batch_size, loss)
    plan = dataclasses.replace(make_plan(config, layout, run, paradigm, len(data.y_train), epoch_iterations, flat.n, loss),
                               hosts=tuple(transport.hosts))
    # A run directory holding a checkpoint of this run: go on from it (mpips/runtime/recovery/checkpointer.py).
    ident = checkpoint_identity(config, layout, flat.n, plan.iterations)
    found = _agree(transport, "looking for a checkpoint",
                   lambda: run.resume_or_claim(config, ident, size) if rank == 0 else None)
    checkpointer = job.enter_context(Checkpointer(transport, run, config, ident, found))
    segment = checkpointer.segment
    # a resumed run keeps its id (older run logs have none: a new one)
    run_id = transport.bcast((run.attrs().get("run_id") if found else None) or new_run_id() if rank == 0 else None)
    transport.clock.origin = transport.bcast(time.time() if rank == 0 else None)
    stopped, counts = None, (0, 0, 0)
    with _one_line_ends_job(transport, run):
        transport.blocking("set-up (the run directory made)", transport.comm.Barrier)   # before anyone opens a file in it
        log = RankLog(run.rank_file(rank, segment), rank, flush_seconds=config.log_flush_seconds,
                      segment=segment, writers=size, run_id=run_id)
        transport.watchdog.before_abort.append(log.flush)   # a lost node's stall keeps what was logged
        if rank == 0:
            announce(plan, segment, versions(transport.library()), workload(config, data, user_model, model),
                     run_id=run_id, placement=layout.placement(transport.hosts))
        try:
            counts = run_job(transport, plan, {rank: log}, {rank: checkpointer}, {rank: flat}, data)
        except (Preempted, DiskFullAtCheckpoint) as e:
            stopped = e  # every rank stopped after the same checkpoint: end cleanly, then say so
        except BaseException:
            with contextlib.suppress(DiskFull):   # the job reports what failed first
                log.close()
            raise
        log.close()
    transport.blocking("the logs' closing", transport.comm.Barrier)   # every rank's log whole before run.h5's status
    if isinstance(stopped, Preempted):
        raise stopped
    failure = str(stopped) if stopped else ""
    why = transport.bcast(judge_training(run, *counts, failure=failure) if rank == 0 else None)
    if why:
        raise TrainingFailed(why)
    return path


@contextlib.contextmanager
def _one_line_ends_job(transport: MPITransport, run: RunDir):
    """A failure that is one line, met by some ranks while the others train,
    or wait for them: a write of this rank's alone (its log, run.h5) that
    found the disk full (exit status 1), or bad input found during the run
    (a paradigm hook's batch size of 0: exit status 2; it ended in a
    traceback of each worker that met it). Every rank ends (an abort; its
    log's file left as it is, see RankLog.close) with one line, said by the
    first rank that failed (one that failed meanwhile gives it time to go
    out), and run.h5 says `failed` if it can still be written (else its
    status stays absent: the reader's `incomplete`)."""
    try:
        yield
    except (DiskFull, ConfigError) as e:
        if transport.first_to_fail():
            print(f"mpips: error: {e}", file=sys.stderr, flush=True)
            if os.path.exists(os.path.join(run.path, "run.h5")):   # (none before rank 0's header)
                with contextlib.suppress(OSError):
                    run.set_status("failed", str(e))
        else:
            time.sleep(1)
        transport.comm.Abort(2 if isinstance(e, ConfigError) else 1)
