"""Two levels of servers (GSSP's): profile, group, and give every rank its level.

World = S global servers + G group servers + W workers (mpips/runtime/layout.py).

Global level: the windows job.train made over COMM_WORLD, whose control
table has one row per group server. The global servers run the ordinary
`Server` loop with SGD of learning rate 1 and nothing else, so a group
server's pushed -delta moves the parameters by +delta, and `server_ready`
applies whatever arrived: no group ever waits for another.

Group level, one per group: a communicator of its group server (rank 0) and
its workers, a `ParameterStore` whose one server is the group server (a full
copy of the parameters) and a `ControlTable` with a row per worker of the job,
in which other groups' workers read as done so that they never gate (the
paradigm's SSP gate then bounds clocks inside the group). Workers run
unchanged against these windows; mpips/runtime/group_server.py is the group server.

Grouping: every worker times `profile_iterations` forward/backward passes on
its shard, with its emulated slowdown; every rank gathers the times and
computes the same groups (or takes `group_assignment`). A job resumed from a
checkpoint takes the groups the checkpoint was made with.
"""
from __future__ import annotations

import dataclasses

import numpy as np
from mpi4py import MPI

from ..paradigms.compress import speed_ranks
from ..paradigms.grouping import GroupSpeed, make_groups
from ..training.data import WorkerShard
from ..training.flatmodel import FlatModel
from .budget import ShardBudget
from .context import Context
from .group_server import GroupServer
from .layout import EVALUATOR, GROUP_SERVER, SERVER, WORKER
from .mpi_transport import ControlTable, ParameterStore
from .roles import run_roles
from .state import W
from .worker import Worker


def run_two_levels(ctx: Context, flat: FlatModel, data):
    """Every role of a GSSP job; `ctx` is the global level. Returns what
    roles.run_roles does (a worker: its Worker)."""
    saved = (ctx.checkpointer.resumed or {}).get("grouping")   # the same on every rank
    times = np.asarray(saved["profiled"]) if saved else profile_all(ctx, flat, data)
    groups, ranks = decide_groups(ctx, times, saved)
    if ctx.role in (SERVER, EVALUATOR):
        ctx.comm.Split(MPI.UNDEFINED, ctx.rank)  # in no group
        run_roles(global_level(ctx), flat, data)
        return
    g = ctx.index if ctx.role == GROUP_SERVER else next(
        i for i, m in enumerate(groups) if ctx.index in m)
    members = groups[g]
    comm = ctx.comm.Split(g, 0 if ctx.role == GROUP_SERVER else 1 + ctx.rank)
    store = ParameterStore(comm, [0], flat.n, clients=members, sparse=ctx.config.compressor != "none")
    control = ControlTable(comm, 0, ctx.layout.workers, 1)
    group = group_level(ctx, g, members, store, control)
    try:
        if ctx.role == WORKER:
            return run_roles(group, flat, data)
        run_group_server(ctx, group, group_server(ctx, group, g, members, ranks[g]), flat)
    finally:
        store.free()
        control.free()
        comm.Free()


def decide_groups(ctx: Context, times: np.ndarray, saved: dict | None) -> tuple[list, list]:
    """The groups (worker indices) from the profiled times, or as a resumed
    checkpoint kept them, and each group's speed rank; rank 0 logs them."""
    layout, cfg = ctx.layout, ctx.config
    if saved:
        groups, source = saved["groups"], "checkpoint"
    else:
        groups = make_groups(cfg, layout.workers, times)
        source = "group_assignment" if cfg.group_assignment else cfg.grouping
    group_times = [float(np.mean(times[m])) for m in groups]
    ranks = speed_ranks(group_times)
    ctx.checkpointer.meta_extra["grouping"] = {"groups": [[int(j) for j in m] for m in groups],
                                           "profiled": times.tolist()}
    if ctx.rank == 0:
        # before the clock starts; a resumed job's time goes on from the checkpoint's
        ctx.log.event(ctx.checkpointer.elapsed if saved else ctx.now(), "groups", groups=groups,
                      profiled=times, group_times=group_times, speed_ranks=ranks,
                      group_servers=layout.group_server_ranks,
                      exchange_every=[cfg.exchange_every or len(m) for m in groups], source=source)
    return groups, ranks


def global_level(ctx: Context) -> Context:
    """A global server's (or the evaluator's) context: the group servers are its clients."""
    return dataclasses.replace(ctx, config=summing(ctx.config), clients="group server",
                               client_ranks=tuple(ctx.layout.group_server_ranks))


def group_level(ctx: Context, g: int, members: list[int], store, control) -> Context:
    """Group g's level, over its own parameter store and control table."""
    return dataclasses.replace(ctx, store=store, control=control,
                               epoch_pushes=len(members) * ctx.iterations_per_epoch,
                               servers="group server", server_ranks=(ctx.layout.group_server_ranks[g],))


def group_server(up: Context, group: Context, g: int, members: list[int], speed_rank: int) -> GroupServer:
    return GroupServer(group, up, group=g, members=members,
                       speed=GroupSpeed(members, up.iterations_per_epoch), speed_rank=speed_rank)


def run_group_server(up: Context, group: Context, server: GroupServer, flat: FlatModel) -> None:
    """The group server's part of roles.run_roles' protocol: same barriers."""
    body = start_group_server(up, group, server, flat)
    up.comm.Barrier()  # parameters in place and every role ready: the clock starts
    group.t0 = up.t0 = up.comm.bcast(None)
    body()
    up.end_of_run()


def start_group_server(up: Context, group: Context, server: GroupServer, flat: FlatModel):
    """Before the clock starts (roles.start_role's part for a group
    server): its group's parameters and table; returns its body."""
    group.store.shard[:] = flat.flat_copy()
    # The first exchange's delta is measured from these parameters, not from
    # the window's zeros the GroupServer saw when it was made (the global
    # parameters would get the initial ones once more from every group).
    np.copyto(server.delta.base, group.store.shard)
    group.store.publish()
    for j in range(group.layout.workers):
        if j not in server.members:
            group.control.write(group.control.worker_offset(j, W.DONE), [1.0])
    if up.checkpointer.state is None:
        server.start()
    else:   # its global row is back with the global table (server 0 restores it)
        up.checkpointer.restore(group, server)
    return server.run


def summing(config):
    """The global servers' optimizer: w -= 1.0 * g and nothing else (no
    momentum, decay or schedule), so a pushed -delta adds delta."""
    return dataclasses.replace(config, optimizer="sgd", lr=1.0, momentum=0.0, nesterov=False,
                               weight_decay=0.0, lr_schedule="none")


def profile_all(ctx: Context, flat: FlatModel, data) -> np.ndarray:
    """Every worker's profiled iteration time (s), indexed by worker, on every rank."""
    mine = np.full(1, np.nan)
    if ctx.role == WORKER:
        shard = WorkerShard(data.x_train, data.y_train, ctx.index, ctx.layout.workers,
                            ctx.config.seed)
        mine[0] = profile(Worker(ctx, flat, ShardBudget(shard, 0, 1)), ctx.config.profile_iterations)
    everyone = np.empty(ctx.comm.Get_size())
    request = ctx.comm.Iallgather([mine, MPI.DOUBLE], [everyone, MPI.DOUBLE])
    ranks = ctx.layout.worker_ranks
    ctx.wait(request.Test, what="gathering the profiled iteration times",
             describe=lambda: f"the workers (ranks {ranks[0]}..{ranks[-1]}) to finish profiling")
    return everyone[ranks]


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
