"""One job, assembled once over a transport (transport.py): its plan, then
its roles' contexts and levels of servers, run to the end. `mpips train`
(job.py, over MPI) and `mpips simulate` (simulate.py, in virtual time) each
pick a transport, check and plan, `run`, and judge the result here."""
from __future__ import annotations

import math
import platform
import sys

import numpy as np
import torch

from ... import __version__
from ...config import Config, ConfigError
from ...io.log import DiskFull
from ...io.rundir import RunDir
from ...paradigms import make_paradigm
from ...paradigms.async_rules import READING
from ...paradigms.base import counted
from ...training.data import load_dataset
from ...training.models import build_model, check_model, model_label
from ..context import Context, Level, Plan, Services
from ..layout import Layout
from ..roles.evaluator import Evaluator
from ..roles.start import check_steps, start_role
from ..roles.worker import Worker
from ..transport.protocols import EveryRank, LevelSpec, Transport
from ..transport.wait import SetupTimeout
from .levels import two_levels


class TrainingFailed(EveryRank):
    """The run ended without training (every push rejected); under MPI every
    rank raises it with the same one-line message after a clean end."""


def setup_phase(config: Config, rank: int, what: str) -> None:
    """Rank 0 names the set-up step under way (seconds of it, on a loaded node)."""
    if rank == 0 and config.progress != "off":
        print(f"mpips: set-up: {what}", file=sys.stderr, flush=True)


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
    check_steps(paradigm, config.paradigm)
    config.check_epoch_size(paradigm, len(data.y_train), "the dataset given" if dataset is not None else "")
    epoch_iterations = counted(config.paradigm, paradigm.iterations_per_epoch, len(data.y_train))
    return data, model, paradigm, epoch_iterations


def make_plan(config: Config, layout: Layout, run: RunDir, paradigm, samples: int, epoch_iterations: float,
              num_params: int, loss_fn=None) -> Plan:
    """The run's plan, sized: a global budget is E passes over the training
    set by everyone (mpips/runtime/roles/budget.py); `iterations` then counts
    rounds of every worker's batch, the unit in which paradigms count rounds
    and servers epochs."""
    total_samples = 0
    if config.budget == "global":
        round_samples = counted(config.paradigm, paradigm.round_samples)
        epoch_iterations = samples / round_samples
        total_samples = (config.iterations * round_samples if config.iterations
                         else max(1, round(config.epochs * samples)))
        iterations = int(np.ceil(total_samples / round_samples))
    else:
        iterations = config.iterations or max(1, int(np.ceil(config.epochs * epoch_iterations - 1e-9)))
    epochs = (total_samples / (epoch_iterations * paradigm.round_samples()) if total_samples
              else iterations / epoch_iterations)
    reads = paradigm.asynchronous and config.async_rule in READING
    return Plan(config, layout, run, iterations, epoch_iterations, epochs, total_samples, num_params,
                config.compressor != "none", reads=reads, loss_fn=loss_fn, training_samples=samples)


def too_short(plan: Plan) -> str:
    """Why a run under the global budget cannot train, or '': a round of every
    worker's batch beyond the training set makes an epoch less than one round
    (256 workers x 16 samples on 1,438 digits: 5 epochs were 2 rounds, 10.6%)."""
    if not plan.total_samples or plan.iterations_per_epoch >= 1:
        return ""
    round_samples = round(plan.training_samples / plan.iterations_per_epoch)
    return (f"a round of the {plan.layout.workers} workers' batches ({round_samples:,} samples) is more than the "
            f"{plan.training_samples:,} training samples: {plan.epochs:g} epoch(s) are {plan.total_samples:,} "
            f"samples, {plan.iterations} round(s) of updates, too few to train; use fewer workers, a smaller "
            f"--batch-size, more data (mnist1d: --mnist1d-samples) or more --epochs")


def announce(plan: Plan, segment: int, versions: dict, trains: dict, *, run_id: str, **more) -> None:
    """Rank 0: run.h5's header, and the job's one line on stdout. `trains`: `workload`'s."""
    config, layout, size = plan.config, plan.layout, plan.layout.size
    plan.run.write_header(config=config.to_dict(), versions=versions, run_id=run_id,
                          layout={**layout.to_dict(), **trains, "world_size": size, "parameters": plan.num_params,
                                  "evaluation": "evaluator" if layout.evaluators else "inline",
                                  "iterations_per_worker": plan.iterations,
                                  "iterations_per_epoch": plan.iterations_per_epoch,
                                  "total_samples": plan.total_samples, **more},
                          ranks=list(range(size)), segment=segment)
    budget = (f"{plan.total_samples} samples in all" if plan.total_samples
              else f"{plan.iterations} iterations per worker")
    if config.time_limit:   # (the probe's runs: a budget they are not meant to reach)
        budget = f"until {config.time_limit:g} s of training or {budget}"
    if too_short(plan):
        print(f"mpips: warning: {too_short(plan)}", file=sys.stderr, flush=True)
    nodes = len({rank["host"] for rank in more.get("placement", ())})
    print(f"mpips: {config.paradigm} | {layout.servers} server(s), {layout.workers} workers"
          f"{', ' + str(layout.group_servers) + ' group servers' if layout.group_servers else ''}"
          f"{f' on {nodes} nodes' if nodes > 1 else ''}"
          f" | {trains['model']} on {trains['dataset']} ({plan.num_params} parameters) | {budget}"
          f" | run {plan.run}", flush=True)


def judge_training(run: RunDir, rejected: int, pushes: int, lost_losses: int = 0, *, failure: str = "") -> str:
    """Rank 0, once every rank's log is closed: the run's status, last of all
    (a `finished` written at the final evaluation stayed when a log could not
    be closed after it); '' if the run finished, else why not (then run.h5
    says `failed` or `diverged`, and the job exits 1). `failure`: a log or
    checkpoint that could not be written (a full disk). Rejected pushes (NaN
    or Inf gradients) are never applied: a run of nothing else made no
    update, and one of more than half of them diverged, whatever its last
    evaluation says; so did one whose final evaluation's loss is not finite
    (`lost_losses`: evaluating ranks whose last loss was NaN or Inf)."""
    status, why = "finished", ""
    if failure:
        status, why = "failed", failure
    elif rejected and rejected == pushes:
        status, why = "failed", (f"no update was made: all {pushes} pushes were rejected (NaN or Inf "
                                 f"gradients); the run did not train (a smaller --lr?)")
    elif 2 * rejected > pushes:
        status, why = "diverged", (f"{rejected} of {pushes} pushes were rejected (NaN or Inf gradients): "
                                   f"the run diverged (a smaller --lr?)")
    elif lost_losses:
        status, why = "diverged", ("the final evaluation's loss is not finite: the run diverged (a smaller --lr?)"
                                   + (f"; {rejected} of {pushes} pushes were rejected (NaN or Inf gradients)"
                                      if rejected else ""))
    elif rejected:
        print(f"mpips: warning: {rejected} of {pushes} pushes were rejected (NaN or Inf "
              f"gradients) and not applied", file=sys.stderr, flush=True)
    try:
        run.set_status(status, why)
    except DiskFull as e:
        return why or str(e)   # no status: the reader's `incomplete`
    return why


def run(transport: Transport, plan: Plan, logs: dict, checkpointers: dict, flats: dict,
        data, gradients=None) -> tuple[int, int, int]:
    """Every role this process runs (`transport.ranks`, each with its log,
    checkpointer and model) to the end (`gradients`: the simulator's
    BatchedGradients, or None); the run's (rejected pushes, pushes,
    evaluating ranks whose last loss was not finite): what judge_training judges."""
    layout = plan.layout
    clients = layout.group_server_ranks or layout.worker_ranks   # who pushes to the servers
    top = LevelSpec(members=tuple(range(layout.size)), servers=tuple(layout.server_ranks),
                    table_rows=layout.clients, slot_rows=tuple(range(layout.clients)))
    handles = transport.level([top], n=plan.num_params, sparse=plan.sparse, reads=plan.reads)
    contexts = {}
    for rank in transport.ranks:
        level = Level.of(handles[rank], tuple(clients), tuple(layout.server_ranks),
                         epoch_pushes=layout.workers * plan.iterations_per_epoch,
                         clients="group server" if layout.group_servers else "worker")
        # every rank its own paradigm, as every MPI rank
        paradigm = make_paradigm(plan.config, layout.workers)
        paradigm.set_iterations(plan.iterations)
        services = Services(logs[rank], transport.clock, checkpointers[rank], level.table, gradients)
        contexts[rank] = ctx = Context(plan, level, services, paradigm, rank, *layout.role(rank))
        ctx.checkpointer.begin(ctx)
    if layout.group_servers:   # a second level of servers (levels.py)
        bodies = two_levels(transport, contexts, flats, data)
    else:
        bodies = {rank: start_role(ctx, flats[rank], data) for rank, ctx in contexts.items()}

    def name(rank):
        role, index = layout.role(rank)
        return f"{rank} ({role.replace('_', ' ')} {index})"
    try:
        results = transport.run(bodies, checkpointers[transport.ranks[0]].elapsed, name=name)
    except SetupTimeout as e:   # a rank did not reach the end
        if 0 in contexts and e.missing:   # the training's end is saved (roles.finish): say so
            contexts[0].log.flush()
            plan.run.set_status("finished", f"rank(s) {', '.join(name(r) for r in e.missing)} did "
                                                 f"not finish; the training's end and final parameters are saved")
        e.status = 1
        raise
    workers = [w for w in results.values() if isinstance(w, Worker)]
    losses = [e.last_loss for e in results.values() if isinstance(e, Evaluator) and e.last_loss is not None]
    counts = np.array([sum(w.rejected for w in workers), sum(w.clock for w in workers),
                       sum(not math.isfinite(loss) for loss in losses)], dtype=np.int64)
    rejected, pushes, lost_losses = (int(x) for x in transport.total(counts))
    return rejected, pushes, lost_losses


def versions(mpi: str) -> dict:
    return {"mpips": __version__, "torch": torch.__version__, "numpy": np.__version__, "mpi": mpi,
            "python": platform.python_version(), "host": platform.node()}
