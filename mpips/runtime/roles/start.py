"""A role of a job over its context: set up before the clock starts, then run by its transport."""
from __future__ import annotations

from typing import Callable

import numpy as np

from ...paradigms.steps import ConfiguredRule, GradientSteps, LocalSteps, OuterNesterov
from ...training.data import GlobalStream, WorkerShard
from ...training.flatmodel import FlatModel
from ...training.optim import Sum, update_rule
from ...validate import ConfigError
from ..context import Context
from ..layout import SERVER, WORKER
from ..state import G
from .budget import ShardBudget, SharedBudget
from .evaluator import Evaluator
from .local_worker import LocalWorker
from .server import Server
from .worker import FaultyWorker, Worker

# what a paradigm may ask for (paradigms/steps.py), and what runs it
WORKER_LOOPS: dict[type, type[Worker]] = {GradientSteps: Worker, LocalSteps: LocalWorker}
UPDATE_RULES = (ConfiguredRule, OuterNesterov)   # (training/optim.update_rule)


def check_steps(paradigm, name: str) -> None:
    """The paradigm's worker loop and update rule are ones the runtime runs,
    else a ConfigError naming them (a plugin's), before any role starts."""
    loop, rule = paradigm.worker_loop(), paradigm.update_rule()
    if type(loop) not in WORKER_LOOPS:
        raise ConfigError("paradigm", name, f"its worker_loop() returned {loop!r}; allowed: "
                                            + ", ".join(f"{k.__name__}()" for k in WORKER_LOOPS))
    if type(rule) not in UPDATE_RULES:
        raise ConfigError("paradigm", name, f"its update_rule() returned {rule!r}; allowed: "
                                            + ", ".join(k.__name__ for k in UPDATE_RULES))


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
        # under a second level of servers, the global ones sum the groups' deltas;
        # else the rule the paradigm asks for
        rule = (Sum(ctx.store.shard) if ctx.layout.group_servers
                else update_rule(ctx.paradigm.update_rule(), ctx.config, ctx.store.shard,
                                 total_epochs=ctx.plan.epochs))
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
        kind = FaultyWorker if faulty else WORKER_LOOPS[type(ctx.paradigm.worker_loop())]
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
        evaluator.finish()
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
    if evaluator is not None:
        if evaluator.last_pushes != evaluator.applied()[1]:
            evaluator.evaluate()
        evaluator.finish()
    params = np.empty(ctx.plan.num_params, dtype=np.float32)
    ctx.store.observe(params)
    # the status last, once every rank's log is closed (assemble.judge_training)
    ctx.plan.run.write_end(wall_seconds=ctx.now(), final_params=params, status=None)
