"""A role of a job, over its context: set up before the clock starts, then
run to the end. The same for both transports: an MPI job runs a role
between barriers (`run_roles`), the simulator as one task of its scheduler
(`start_role`); a second level of servers (levels.py) runs its workers and
servers with `run_roles` too."""
from __future__ import annotations

import time
from typing import Callable

import numpy as np

from ..io.log import write_run_end
from ..training.data import GlobalStream, WorkerShard
from ..training.flatmodel import FlatModel
from .budget import ShardBudget, SharedBudget
from .context import Context
from .evaluator import Evaluator
from .layout import SERVER, WORKER
from .server import Server
from .state import G
from .worker import Worker


def run_roles(ctx: Context, flat: FlatModel, data) -> Worker | None:
    """Servers and workers over ctx's windows, from the start barrier to the end one
    (group servers make the same collectives in levels.run_group_server)."""
    body = start_role(ctx, flat, data)
    ctx.comm.Barrier()  # parameters in place and every role ready: the clock starts
    # (a resumed job's clock goes on from the checkpoint's training time)
    ctx.t0 = ctx.comm.bcast(time.time() - ctx.checkpointer.elapsed if ctx.rank == 0 else None)
    worker = body()
    ctx.end_of_run()
    return worker


def start_role(ctx: Context, flat: FlatModel, data) -> Callable[[], Worker | None]:
    """This rank's role, set up before the clock starts (restored from a
    checkpoint if there is one); returns its body, which runs it to the end
    (a worker's body returns its Worker). The same for every transport:
    run_roles runs it between MPI barriers, the simulator
    (mpips/runtime/simulate.py) as one task of its scheduler."""
    role, index = ctx.role, ctx.index
    if role == SERVER:
        lo, hi = ctx.store.bounds[index]
        ctx.store.shard[:] = flat.flat_copy()[lo:hi]
        ctx.store.publish()
        inline = index == 0 and not ctx.layout.evaluators
        evaluator = Evaluator(ctx, flat, data.x_test, data.y_test) if inline else None
        server = Server(ctx, evaluator)
        ctx.checkpointer.restore(ctx, server)

        def serve():
            server.run()
            if index == 0:
                _finish(ctx, evaluator)
        return serve
    if role == WORKER:
        worker = Worker(ctx, flat, worker_budget(ctx, data))
        ctx.checkpointer.restore(ctx, worker)

        def work():
            worker.run()
            ctx.wait_for_servers_done(stop=worker.stop_for_checkpoint)
            return worker
        return work
    evaluator = Evaluator(ctx, flat, data.x_test, data.y_test)
    ctx.checkpointer.restore(ctx, evaluator)

    def evaluate():
        evaluator.run()
        ctx.wait_for_servers_done()
        if evaluator.last_pushes != evaluator.applied()[1]:
            evaluator.evaluate()   # the final one
    return evaluate


def worker_budget(ctx: Context, data):
    """Where this worker's batches come from: claims on the global budget, or its shard."""
    cfg = ctx.config
    if cfg.budget == "global":
        table = ctx.budget_table
        return SharedBudget(GlobalStream(data.x_train, data.y_train, cfg.seed), ctx.total_samples,
                            lambda n: table.add(G.CLAIMED, n), time_limit=cfg.time_limit, now=ctx.now)
    shard = WorkerShard(data.x_train, data.y_train, ctx.index, ctx.layout.workers, cfg.seed)
    return ShardBudget(shard, ctx.iterations, ctx.iterations_per_epoch)


def _finish(ctx: Context, evaluator: Evaluator | None) -> None:
    """Server 0, after every server is done: the final evaluation if it
    evaluates inline, then the run's end in run.h5 (final parameters, wall
    time, status), whether or not an evaluator rank gets to its own final
    evaluation: a stopped evaluator loses no trained work."""
    ctx.wait_for_servers_done()
    if evaluator is not None and evaluator.last_pushes != evaluator.applied()[1]:
        evaluator.evaluate()
    params = np.empty(ctx.num_params, dtype=np.float32)
    ctx.store.observe(params)
    # the status last, once every rank's log is closed (job.judge_training)
    write_run_end(ctx.run_dir, wall_seconds=ctx.now(), final_params=params, status=None)
