"""Two levels of servers (GSSP's): profile, group, and give every rank its level.

World = S global servers + G group servers + W workers (mpips/runtime/layout.py).

Global level: the one every job has (assemble.run), a row per group server
in its table; its servers' rule is `Sum` (optim.py), so a group server's
pushed -delta moves the parameters by +delta whenever it lands, and no group
ever waits for another. Group level, one per group: its group server
(group_server.py, a full copy of the parameters) and its workers, which run
unchanged; the table has a row per worker of the job, other groups' read as
done so that they never gate (the paradigm's SSP gate bounds clocks inside
the group).

Grouping: every worker times `profile_iterations` forward/backward passes on
its shard, with its emulated slowdown; every rank gathers the times and
computes the same groups (or takes `group_assignment`). A job resumed from a
checkpoint takes the groups the checkpoint was made with.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ...paradigms.compress import speed_ranks
from ...paradigms.grouping import GroupSpeed, group_options, make_groups
from ...training.data import WorkerShard
from ...training.flatmodel import FlatModel
from ..context import Context, Level
from ..layout import EVALUATOR, GROUP_SERVER, SERVER, WORKER
from ..roles.budget import ShardBudget
from ..roles.group_server import GroupServer
from ..roles.start import start_role
from ..roles.worker import Worker
from ..state import W
from ..transport.protocols import LevelSpec, Transport


def two_levels(transport: Transport, contexts: dict, flats: dict, data) -> dict:
    """Every role's body (by rank) of a job with a second level of servers;
    `contexts` are this process's ranks' on the global level."""
    first = next(iter(contexts.values()))
    plan, layout = first.plan, first.layout
    options = group_options(first.config)
    saved = (first.checkpointer.resumed or {}).get("grouping")   # the same on every rank
    if saved:
        times = np.asarray(saved["profiled"])
    else:   # every worker's profiled iteration time, on every rank
        def work(ctx, flat):
            shard = WorkerShard(data.x_train, data.y_train, ctx.index, layout.workers, ctx.config.seed)
            return lambda: profile(Worker(ctx, flat, ShardBudget(shard, 0, 1)), options.profile_iterations)
        times = transport.each({rank: work(ctx, flats[rank]) for rank, ctx in contexts.items()
                                if ctx.role == WORKER})[layout.worker_ranks]
    groups, ranks = decide_groups(contexts, times, saved)
    specs = [LevelSpec(members=(layout.group_server_ranks[g], *(layout.worker_ranks[j] for j in members)),
                       servers=(layout.group_server_ranks[g],), table_rows=layout.workers,
                       slot_rows=tuple(members), level=1) for g, members in enumerate(groups)]
    handles = transport.level(specs, n=plan.num_params, sparse=plan.sparse, reads=plan.reads)
    bodies = {}
    for rank, ctx in contexts.items():
        if ctx.role in (SERVER, EVALUATOR):
            bodies[rank] = start_role(ctx, flats[rank], data)
            continue
        g = ctx.index if ctx.role == GROUP_SERVER else next(i for i, m in enumerate(groups) if ctx.index in m)
        # group g's level: a row per worker of the job in its table, other groups' read as done
        group = dataclasses.replace(ctx, level=Level.of(
            handles[rank], tuple(layout.worker_ranks), (layout.group_server_ranks[g],),
            epoch_pushes=len(groups[g]) * plan.iterations_per_epoch, servers="group server"))
        if ctx.role == WORKER:
            bodies[rank] = start_role(group, flats[rank], data)
        else:
            server = GroupServer(group, ctx, group=g, members=groups[g],
                                 speed=GroupSpeed(groups[g], ctx.plan.iterations_per_epoch), speed_rank=ranks[g])
            bodies[rank] = start_group_server(ctx, group, server, flats[rank])
    return bodies


def decide_groups(contexts: dict, times: np.ndarray, saved: dict | None) -> tuple[list, list]:
    """The groups (worker indices) from the profiled times, or as a resumed
    checkpoint kept them, and each group's speed rank; rank 0 logs them."""
    ctx = next(iter(contexts.values()))
    layout, options = ctx.layout, group_options(ctx.config)
    if saved:
        groups, source = saved["groups"], "checkpoint"
    else:
        groups = make_groups(ctx.config, layout.workers, times)
        source = "group_assignment" if options.group_assignment else options.grouping
    group_times = [float(np.mean(times[m])) for m in groups]
    ranks = speed_ranks(group_times)
    for ctx in contexts.values():
        ctx.checkpointer.meta_extra["grouping"] = {"groups": [[int(j) for j in m] for m in groups],
                                                   "profiled": times.tolist()}
    if 0 in contexts:
        ctx = contexts[0]
        # before the clock starts: at its zero, a resumed job's the checkpoint's training time
        # (not now(): set-up and profiling may outlast the first segment's checkpoint, and a
        # resumed run's log keeps only what came before it)
        ctx.log.event(ctx.checkpointer.elapsed, "groups", groups=groups,
                      profiled=times, group_times=group_times, speed_ranks=ranks,
                      group_servers=layout.group_server_ranks,
                      exchange_every=[options.exchange_every or len(m) for m in groups], source=source)
    return groups, ranks


def start_group_server(up: Context, group: Context, server: GroupServer, flat: FlatModel):
    """Before the clock starts (roles.start_role's part for a group
    server): its group's parameters and table; returns its body."""
    group.store.shard[:] = flat.flat_copy()
    # The first exchange's delta is measured from these parameters, not from
    # the window's zeros the GroupServer saw when it was made (the global
    # parameters would get the initial ones once more from every group).
    np.copyto(server.delta.base, group.store.shard)
    if server.read is not None:   # its first delta builds on them too (version 0)
        np.copyto(server.read, group.store.shard)
    group.store.publish()
    for j in range(group.layout.workers):
        if j not in server.members:
            group.table.write(group.table.worker_offset(j, W.DONE), [1.0])
    if up.checkpointer.state is None:
        server.start()
    else:   # its global row is back with the global table (server 0 restores it)
        up.checkpointer.restore(group, server)
    return server.run


def profile(worker: Worker, iterations: int) -> float:
    """Busy time of one of the worker's iterations: forward/backward on its
    shard, then its persistent emulated slowdown (slept, as in training).
    The minimum over the passes: other processes only ever add time (on a
    busy node a pass can take ten times its due). One untimed pass first:
    torch's first pass pays for lazy set-up."""
    shard, batch = worker.data.shard, worker.ctx.config.batch_size
    worker.compute_gradient(*shard.next_batch(batch))
    clock = worker.ctx.clock
    times = []
    for _ in range(iterations):
        began = clock.perf_counter()
        _, compute = worker.compute_gradient(*shard.next_batch(batch))
        model = worker.slowdown.device_time
        target = worker.slowdown.persistent * (compute if model is None else model.seconds(batch))
        clock.sleep(max(0.0, began + target - clock.perf_counter()))
        times.append(clock.perf_counter() - began)
    return float(np.min(times))
