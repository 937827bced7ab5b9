"""A role of a job over its context: set up before the clock starts, then run by its transport."""
from __future__ import annotations

from typing import Callable

import numpy as np

from ...io.log import write_run_end
from ...training.data import GlobalStream, WorkerShard
from ...training.flatmodel import FlatModel
from ...training.optim import Sum, outer_rule, server_rule
from ..context import Context
from ..layout import SERVER, WORKER
from ..state import G
from .budget import ShardBudget, SharedBudget
from .evaluator import Evaluator
from .local_worker import LocalWorker
from .server import Server
from .worker import FaultyWorker, Worker


def start_role(ctx: Context, flat: FlatModel, data) -> Callable[[], Worker | Evaluator | None]:
    """This rank's role, set up before the clock starts (restored from a
    checkpoint if there is one); returns its body, which runs it to the end
    (a worker's body returns its Worker, an evaluating rank's its Evaluator)."""
    role, index = ctx.role, ctx.index
    if role == SERVER:
        lo, hi = ctx.store.bounds[index]
        ctx.store.shard[:] = flat.flat_copy()[lo:hi]
        ctx.store.publish()
        inline = index == 0 and not ctx.layout.evaluators
        evaluator = Evaluator(ctx, flat, data.x_test, data.y_test) if inline else None
        # under a second level of servers, the global ones sum the groups' deltas
        # (Local SGD: the outer rule on the pseudo-gradients)
        rule = (Sum(ctx.store.shard) if ctx.layout.group_servers
                else outer_rule(ctx.config, ctx.store.shard) if ctx.paradigm.local_sgd
                else server_rule(ctx.config, ctx.store.shard, total_epochs=ctx.plan.epochs))
        server = Server(ctx, rule, evaluator)
        ctx.checkpointer.restore(ctx, server)

        def serve():
            server.run()
            if index == 0:
                _finish(ctx, evaluator)
            return evaluator
        return serve
    if role == WORKER:
        faulty = ctx.config.fail_at or ctx.config.nan_at   # (tests' options)
        kind = FaultyWorker if faulty else LocalWorker if ctx.paradigm.local_sgd else Worker
        worker = kind(ctx, flat, worker_budget(ctx, data))
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
        return evaluator
    return evaluate


def worker_budget(ctx: Context, data):
    """Where this worker's batches come from: claims on the global budget, or its shard."""
    cfg = ctx.config
    if cfg.budget == "global":
        table = ctx.services.budget_table
        return SharedBudget(GlobalStream(data.x_train, data.y_train, cfg.seed), ctx.plan.total_samples,
                            lambda n: table.add(G.CLAIMED, n), time_limit=cfg.time_limit, now=ctx.now)
    shard = WorkerShard(data.x_train, data.y_train, ctx.index, ctx.layout.workers, cfg.seed)
    # (a per-worker budget's iterations per epoch are whole: the paradigm's count)
    return ShardBudget(shard, ctx.plan.iterations, int(ctx.plan.iterations_per_epoch))


def _finish(ctx: Context, evaluator: Evaluator | None) -> None:
    """Server 0, after every server is done: the final evaluation if it
    evaluates inline, then the run's end in run.h5 (final parameters, wall
    time, status), whether or not an evaluator rank gets to its own final
    evaluation: a stopped evaluator loses no trained work."""
    ctx.wait_for_servers_done()
    if evaluator is not None and evaluator.last_pushes != evaluator.applied()[1]:
        evaluator.evaluate()
    params = np.empty(ctx.plan.num_params, dtype=np.float32)
    ctx.store.observe(params)
    # the status last, once every rank's log is closed (assemble.judge_training)
    write_run_end(ctx.plan.run_dir, wall_seconds=ctx.now(), final_params=params, status=None)
