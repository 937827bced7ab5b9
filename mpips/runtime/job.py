"""Start a job: agree on the set-up, split roles, make the windows, run each role."""
from __future__ import annotations

import contextlib
import copy
import os
import platform
import sys
import time

import numpy as np
import torch
from mpi4py import MPI

from .. import __version__
from ..config import Config, ConfigError
from ..io.checkpoint import CheckpointError, find_resume, run_attrs
from ..io.checkpoint import identity as checkpoint_identity
from ..io.log import DiskFull, RankLog, rank_file, set_status, write_run_header
from ..io.rundir import RunDirLock, claim, new_run_id
from ..paradigms import make_paradigm
from ..paradigms.base import counted
from ..training.data import DataError, dataset_label, load_dataset
from ..training.flatmodel import FlatModel
from ..training.models import build_model, check_model, model_label
from .checkpointer import Checkpointer, DiskFullAtCheckpoint, Preempted
from .context import Context
from .layout import EVALUATOR, SERVER, WORKER, make_layout
from .levels import run_two_levels
from .mpi_transport import ControlTable, ParameterStore
from .rendezvous import allgather_within
from .roles import run_roles
from .wait import precise_sleeps


class SetupError(Exception):
    """Bad input found while setting up; every rank raises it with the same
    one-line message, so the job ends cleanly instead of aborting."""


class TrainingFailed(Exception):
    """The run ended without training (every push rejected); every rank
    raises it with the same one-line message after a clean end."""


def default_run_dir(config: Config) -> str:
    return os.path.join("runs", time.strftime("%Y%m%d-%H%M%S") + f"-{config.paradigm}")


def _agree(comm: MPI.Intracomm, config: Config, what: str, fn):
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


def exchange(comm: MPI.Intracomm, config: Config, what: str, value) -> list:
    """Every rank's `value` on every rank, within the stall timeout (mpips/runtime/rendezvous.py)."""
    return allgather_within(comm, value, what=f"set-up ({what})", warn=config.stall_warn,
                            timeout=config.stall_timeout)


def _same_job_everywhere(comm: MPI.Intracomm, config: Config, data, model) -> None:
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


def own_run_dir(run_dir: str) -> RunDirLock:
    """The run directory exists, takes files (an existing one may not: /proc)
    and is this job's alone (mpips/io/rundir.py)."""
    try:
        os.makedirs(run_dir, exist_ok=True)
        probe = os.path.join(run_dir, f".mpips-probe-{os.getpid()}")
        with open(probe, "w"):
            pass
        os.remove(probe)
        return RunDirLock(run_dir)
    except OSError as e:
        raise ConfigError("run_dir", run_dir, f"cannot write there ({e.strerror})") from None


def resume_or_claim(run_dir: str, config: Config, ident: dict, ranks: int):
    """The checkpoint to resume from, if the directory holds one of this run
    (never with --overwrite); else the directory is claimed for a fresh start."""
    found = None if config.overwrite else find_resume(run_dir, ident, ranks)
    if found is None:
        claim(run_dir, config.to_dict(), overwrite=config.overwrite)
    return found


def _check_epoch_size(config: Config, paradigm, samples: int) -> None:
    """A run sized in epochs of each worker's shard (budget per-worker) needs
    an epoch of at least one round: a batch beyond a worker's shard would
    make every "epoch" several passes."""
    workers = paradigm.num_workers
    if samples < workers:
        raise ConfigError("workers", workers, f"more than the {samples} training samples of {config.dataset}")
    if config.batch_size > samples:
        # one batch beyond the training set: its claim would span passes (epoch 1.39 after one)
        raise ConfigError("batch_size", config.batch_size,
                          f"must be <= {samples}, the training samples of {config.dataset}")
    total, field = counted(config.paradigm, paradigm.round_samples), paradigm.round_setting
    if config.iterations or config.budget == "global":
        return   # sized in iterations, or in samples of the whole set (mpips/runtime/budget.py): nothing to miscount
    if total <= samples:
        return
    if total == workers * config.batch_size and field == "batch_size":
        raise ConfigError("batch_size", config.batch_size,
                          f"must be <= {samples // workers}, a worker's share of the {samples} "
                          f"training samples (an epoch); or size the run with --iterations")
    raise ConfigError(field, getattr(config, field),
                      f"a round of {total} samples exceeds the {samples} training samples "
                      f"(an epoch); use a smaller batch, or --iterations")


def gpu_index(wants_gpu: list[bool], local_rank: int, gpus: int) -> int:
    """The GPU of a node's rank `local_rank`: the node's ranks that use one
    (`wants_gpu`, in local rank order) take the `gpus` it sees in turn, one
    each when there are enough, shared round-robin when not."""
    return sum(wants_gpu[:local_rank]) % gpus


def _device(config: Config, comm: MPI.Intracomm, *, wants_gpu: bool) -> torch.device:
    """This rank's device (under Slurm's per-task GPU binding each rank sees its own one)."""
    local = comm.Split_type(MPI.COMM_TYPE_SHARED)
    users, local_rank = local.allgather(wants_gpu), local.Get_rank()
    local.Free()
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


def versions() -> dict:
    return {"mpips": __version__, "torch": torch.__version__, "numpy": np.__version__,
            "mpi": MPI.Get_library_version().replace("\x00", "").splitlines()[0].strip(),
            "python": platform.python_version(), "host": platform.node()}


def prepare(config: Config, layout, *, model=None, dataset=None):
    """Everything a rank would otherwise find bad only later, alone, in a
    worker or a server (where it can only abort the job), checked on every
    rank so that bad input ends the job with one line: (data, model,
    paradigm, a worker's iterations per epoch). `model` and `dataset`: a
    user's objects (mpips.train) instead of the configuration's."""
    config.check_workers(layout.workers)
    try:
        data = load_dataset(config) if dataset is None else dataset
    except MemoryError:
        raise ConfigError("dataset", config.dataset, "does not fit in this rank's memory") from None
    torch.manual_seed(config.seed)
    model = build_model(config.model if model is None else model, data.input_shape, data.num_classes)
    check_model(model, config.model if model is None else model_label(model), data.x_train[:2], data.num_classes)
    paradigm = make_paradigm(config, layout.workers)
    _check_epoch_size(config, paradigm, len(data.y_train))
    ipe = counted(config.paradigm, paradigm.iterations_per_epoch, len(data.y_train))
    return data, model, paradigm, ipe


def sized(config: Config, paradigm, samples: int, ipe: float) -> tuple[int, float, int]:
    """The run's length: (iterations, iterations per epoch, total samples).
    A global budget is E passes over the training set by everyone
    (mpips/runtime/budget.py); `iterations` then counts rounds of every worker's
    batch, the unit in which paradigms count rounds and servers epochs."""
    total_samples = 0
    if config.budget == "global":
        round_samples = counted(config.paradigm, paradigm.round_samples)
        ipe = samples / round_samples
        total_samples = (config.iterations * round_samples if config.iterations
                         else max(1, round(config.epochs * samples)))
        iterations = int(np.ceil(total_samples / round_samples))
    else:
        iterations = config.iterations or max(1, int(np.ceil(config.epochs * ipe - 1e-9)))
    return iterations, ipe, total_samples


def workload(config: Config, data, model=None, built=None) -> dict:
    """What the run trains, by name: the configuration's model and dataset,
    or a user's, named by what they are: an object of mpips.train's `model`
    by its name and the module it built; `data` (data.Dataset), when not a
    built-in one, by its name (`package.module:function`, or `user` for
    mpips.train's `dataset`), sizes and shapes (run.h5's layout; RunLog.model,
    RunLog.dataset)."""
    name = config.model
    if model is not None:
        name = model_label(model)
        if built is not None and type(built).__name__ not in name:
            name += f" ({type(built).__name__})"
    builtin = data.name == config.dataset and ":" not in config.dataset
    return {"model": name, "dataset": config.dataset if builtin else dataset_label(data)}


def announce(ctx: Context, size: int, versions: dict, trains: dict, *, run_id: str, **more) -> None:
    """Rank 0: run.h5's header, and the job's one line on stdout. `trains`: `workload`'s."""
    config, layout = ctx.config, ctx.layout
    write_run_header(ctx.run_dir, config=config.to_dict(), versions=versions, run_id=run_id,
                     layout={**layout.to_dict(), **trains, "world_size": size, "parameters": ctx.num_params,
                             "evaluation": "evaluator" if layout.evaluators else "inline",
                             "iterations_per_worker": ctx.iterations,
                             "iterations_per_epoch": ctx.iterations_per_epoch,
                             "total_samples": ctx.total_samples, **more},
                     ranks=list(range(size)), segment=ctx.checkpointer.segment)
    budget = (f"{ctx.total_samples} samples in all" if ctx.total_samples
              else f"{ctx.iterations} iterations per worker")
    print(f"mpips: {config.paradigm} | {layout.servers} server(s), {layout.workers} workers"
          f"{', ' + str(layout.group_servers) + ' group servers' if layout.group_servers else ''}"
          f" | {trains['model']} on {trains['dataset']} ({ctx.num_params} parameters) | {budget}"
          f" | run {ctx.run_dir}", flush=True)


def train(config: Config, comm: MPI.Intracomm = MPI.COMM_WORLD, *, model=None, dataset=None,
          loss=None) -> str:
    """Run one training job over `comm`; returns the run directory. `model`,
    `dataset` (a data.Dataset), `loss`: a user's objects (mpips.train)."""
    held: list[RunDirLock] = []   # the run directory's lock, rank 0's, however the job ends
    try:
        return _train(config, comm, model, dataset, loss, held)
    finally:
        for lock in held:
            lock.release()


def _train(config: Config, comm: MPI.Intracomm, model, dataset, loss, held: list) -> str:
    torch.set_num_threads(config.torch_threads)
    precise_sleeps()
    rank, size = comm.Get_rank(), comm.Get_size()
    layout = _agree(comm, config, "the layout", lambda: make_layout(config, size))
    config = config.with_workers(layout.workers)
    role, index = layout.role(rank)

    run_dir = comm.bcast(config.run_dir or default_run_dir(config) if rank == 0 else None)
    config.run_dir = run_dir

    user_model = model
    data, model, paradigm, ipe = _agree(comm, config, "reading the data, building the model",
                                        lambda: prepare(config, layout,
                                                                model=model, dataset=dataset))
    _same_job_everywhere(comm, config, data, model)
    lock = _agree(comm, config, "the run directory",     # last: bad input leaves none
                  lambda: own_run_dir(run_dir) if rank == 0 else None)
    if lock is not None:
        held.append(lock)
    # Collective on every rank (it splits a node-local communicator); workers and the
    # evaluator compute on GPUs, servers apply on the CPU beside their windows.
    device = _agree(comm, config, "the devices", lambda: _device(config, comm, wants_gpu=role in (WORKER, EVALUATOR)))
    flat = FlatModel(model, device)
    if role == WORKER:
        warm_up(flat, data, config.batch_size, loss)
    iterations, ipe, total_samples = sized(config, paradigm, len(data.y_train), ipe)
    paradigm.set_iterations(iterations)
    # A run directory holding a checkpoint of this run: go on from it (mpips/runtime/checkpointer.py).
    ident = checkpoint_identity(config, layout, flat.n, iterations)
    found = _agree(comm, config, "looking for a checkpoint",
                   lambda: resume_or_claim(run_dir, config, ident, size) if rank == 0 else None)
    checkpointer = Checkpointer(comm, run_dir, config, ident, found)
    segment = checkpointer.segment
    # a resumed run keeps its id (older run logs have none: a new one)
    run_id = comm.bcast((run_attrs(run_dir).get("run_id") if found else None) or new_run_id() if rank == 0 else None)

    role_comm = comm.Split(color={SERVER: 0, WORKER: 2, EVALUATOR: 3}.get(role, 1), key=rank)
    store = ParameterStore(comm, layout.server_ranks, flat.n, clients=layout.clients,
                           sparse=config.compressor != "none")
    control = ControlTable(comm, layout.server_ranks[0], layout.clients, layout.servers)
    t0 = comm.bcast(time.time() if rank == 0 else None)
    comm.Barrier()  # run_dir exists before anyone opens a file in it
    stopped, counts = None, (0, 0)
    with _full_disk_ends_job(comm, control, run_dir):
        log = RankLog(rank_file(run_dir, rank, segment), rank, flush_seconds=config.log_flush_seconds,
                      segment=segment, writers=size, run_id=run_id)
        ctx = Context(config=config, layout=layout, comm=comm, role_comm=role_comm, rank=rank,
                      role=role, index=index, run_dir=run_dir, t0=t0, store=store, control=control,
                      log=log, paradigm=paradigm, iterations=iterations, iterations_per_epoch=ipe,
                      num_params=flat.n, checkpointer=checkpointer, total_samples=total_samples,
                      budget_table=control, loss_fn=loss)
        if rank == 0:
            announce(ctx, size, versions(), workload(config, data, user_model, model), run_id=run_id)
        checkpointer.begin(ctx)
        try:
            if layout.group_servers:  # a second level of servers (mpips/runtime/levels.py)
                worker = run_two_levels(ctx, flat, data)
            else:
                worker = run_roles(ctx, flat, data)
            counts = _pushes(ctx, worker)
        except (Preempted, DiskFullAtCheckpoint) as e:
            stopped = e  # every rank stopped after the same checkpoint: end cleanly, then say so
        except BaseException:
            with contextlib.suppress(DiskFull):   # the job reports what failed first
                log.close()
            checkpointer.close()
            raise
        log.close()
    comm.Barrier()   # every rank's log is whole before run.h5 says `finished`
    checkpointer.close()
    store.free()
    control.free()
    role_comm.Free()
    if isinstance(stopped, Preempted):
        raise stopped
    failure = str(stopped) if stopped else ""
    why = comm.bcast(judge_training(run_dir, *counts, failure=failure) if rank == 0 else None)
    if why:
        raise TrainingFailed(why)
    return run_dir


@contextlib.contextmanager
def _full_disk_ends_job(comm: MPI.Intracomm, control: ControlTable, run_dir: str):
    """A write of this rank's alone (its log, run.h5) found the disk full
    while the others train, or wait for it: every rank ends (comm.Abort;
    its log's file left as it is, see RankLog.close) with one line, said by
    the first rank that failed (one that failed meanwhile gives it time to
    go out), and run.h5 says `failed` if it can still be written (else
    its status stays absent: the reader's `incomplete`)."""
    try:
        yield
    except DiskFull as e:
        if control.first_to_fail():
            print(f"mpips: error: {e}", file=sys.stderr, flush=True)
            if os.path.exists(os.path.join(run_dir, "run.h5")):   # (none before rank 0's header)
                with contextlib.suppress(OSError):
                    set_status(run_dir, "failed", str(e))
        else:
            time.sleep(1)
        comm.Abort(1)


def _pushes(ctx: Context, worker) -> tuple[int, int]:
    """After the end barrier, on every rank: the run's (rejected pushes, pushes)."""
    mine = np.array([worker.rejected, worker.clock] if worker is not None else [0, 0], dtype=np.int64)
    rejected, pushes = (int(x) for x in ctx.comm.allreduce(mine))
    return rejected, pushes


def judge_training(run_dir: str, rejected: int, pushes: int, *, failure: str = "") -> str:
    """Rank 0, once every rank's log is closed: the run's status, last of all
    (a `finished` written at the final evaluation stayed when a log could not
    be closed after it); '' if the run finished, else why not (then run.h5
    says `failed` or `diverged`, and the job exits 1). `failure`: a log or
    checkpoint that could not be written (a full disk). Rejected pushes (NaN
    or Inf gradients) are never applied: a run of nothing else made no
    update, and one of mostly those diverged (--lr 1e6: 86 of 90 rejected,
    and it said `finished`)."""
    status, why = "finished", ""
    if failure:
        status, why = "failed", failure
    elif rejected and 2 * rejected <= pushes:
        print(f"mpips: warning: {rejected} of {pushes} pushes were rejected (NaN or Inf "
              f"gradients) and not applied", file=sys.stderr, flush=True)
    elif rejected and rejected < pushes:
        status, why = "diverged", (f"{rejected} of {pushes} pushes were rejected (NaN or Inf gradients): "
                                   f"the run diverged (a smaller --lr?)")
    elif rejected:
        status, why = "failed", (f"no update was made: all {pushes} pushes were rejected (NaN or Inf "
                                 f"gradients); the run did not train (a smaller --lr?)")
    try:
        set_status(run_dir, status, why)
    except DiskFull as e:
        return why or str(e)   # no status: the reader's `incomplete`
    return why
