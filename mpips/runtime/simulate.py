"""`mpips simulate`: every role of a job in one process, in virtual time.

The roles are the MPI job's own (roles.start_role, levels.py's two levels of servers, the
paradigms, the budget, the device-time emulation), each a task of a
deterministic scheduler (mpips/runtime/scheduler.py) over the in-process transport
(mpips/runtime/local_transport.py) instead of MPI windows. Gradients are really computed;
an iteration's compute takes the device-time model's virtual time
(`--device-time`, 20ms unless given; slowdowns and stragglers as under MPI),
pulls and pushes the network model's (`--sim-latency`, `--sim-bandwidth`,
`--sim-jitter`), a server's apply `--sim-apply` and the sum of its pushes.
The run log is the MPI job's (same files and schema, times virtual), so
`mpips info` and analysis/ read it unchanged. On one build and CPU a run is
bit-reproducible; on another CPU it keeps its schedule and its floats drift by
rounding; evaluating it never changes it (docs/simulator.md, "Reproducible where").
"""
from __future__ import annotations

import copy
import dataclasses
import platform

import numpy as np
import torch

from .. import __version__
from ..config import Config, ConfigError
from ..io.log import RankLog, rank_file
from ..paradigms import make_paradigm
from ..training.data import WorkerShard
from ..training.flatmodel import FlatModel
from .budget import ShardBudget
from .checkpointer import NoCheckpoints
from .context import Context
from ..io.rundir import claim, new_run_id
from .job import (TrainingFailed, announce, default_run_dir, judge_training, own_run_dir, prepare, sized,
                  workload)
from .layout import GROUP_SERVER, SERVER, WORKER, make_layout, ranks_for
from .levels import decide_groups, global_level, group_level, group_server, profile, start_group_server
from .local_transport import LocalControlTable, LocalParameterStore, Network, SharedParameters, watch_gates
from .roles import start_role
from .scheduler import Scheduler
from .worker import Worker

DEFAULT_DEVICE_TIME = "20ms"


def simulated_config(config: Config) -> Config:
    """The settings a simulation needs, or a ConfigError naming the field."""
    if not config.workers:
        raise ConfigError("workers", config.workers, "simulate needs the number of workers (--workers N)")
    if config.checkpoint_every:
        raise ConfigError("checkpoint_every", config.checkpoint_every,
                          "the simulator takes no checkpoints: 0")
    if config.device != "cpu":
        raise ConfigError("device", config.device, "the simulator computes on the cpu: cpu")
    if not config.device_time:
        config = dataclasses.replace(config, device_time=DEFAULT_DEVICE_TIME)
    return config


def simulate(config: Config, *, model=None, dataset=None, loss=None) -> str:
    """Run the job `config` describes in virtual time; returns the run directory.
    `model`, `dataset` (a data.Dataset), `loss`: a user's objects (mpips.simulate)."""
    config = simulated_config(config)
    torch.set_num_threads(config.torch_threads)
    config.run_dir = config.run_dir or default_run_dir(config)
    size = ranks_for(config)
    layout = make_layout(config, size)
    data, built, paradigm, ipe = prepare(config, layout, model=model, dataset=dataset)
    lock = own_run_dir(config.run_dir)    # last: bad input leaves no directory
    try:
        claim(config.run_dir, config.to_dict(), overwrite=config.overwrite)
        return _simulate(config, size, layout, data, built, paradigm, ipe, loss,
                         workload(config, data, model, built))
    finally:
        lock.release()


def _simulate(config: Config, size: int, layout, data, model, paradigm, ipe: float, loss, trains: dict) -> str:
    run_id = new_run_id()
    iterations, ipe, total_samples = sized(config, paradigm, len(data.y_train), ipe)
    scheduler = Scheduler()
    network = Network(config.sim_latency, config.sim_bandwidth, config.sim_jitter, config.seed,
                      config.sim_apply, config.sim_apply_per_push)
    n = FlatModel(model).n
    sparse = config.compressor != "none"
    shared = SharedParameters(n, layout.servers, range(layout.clients))
    table = LocalControlTable.shared(layout.clients, layout.servers)

    contexts, flats = [], []
    for rank in range(size):
        role, index = layout.role(rank)
        # every rank its own paradigm and model, as every MPI rank (the same initial weights)
        mine = make_paradigm(config, layout.workers)
        mine.set_iterations(iterations)
        watch_gates(mine)
        control = LocalControlTable(table, scheduler, layout.clients, layout.servers)
        contexts.append(Context(
            config=config, layout=layout, comm=None, role_comm=None, rank=rank, role=role, index=index,
            run_dir=config.run_dir, t0=0.0,
            store=LocalParameterStore(shared, scheduler, network.link(0, role, index),
                                      server=index if role == SERVER else None,
                                      world_server_ranks=layout.server_ranks, sparse=sparse),
            # every log flushes by the wall clock: `size` of them in one process
            # would flush `size` times as often
            control=control, log=RankLog(rank_file(config.run_dir, rank), rank,
                                         flush_seconds=config.log_flush_seconds * size, run_id=run_id),
            paradigm=mine, iterations=iterations, iterations_per_epoch=ipe, num_params=n,
            checkpointer=NoCheckpoints(config), total_samples=total_samples, budget_table=control,
            clock=scheduler.clock, loss_fn=loss))
        flats.append(FlatModel(copy.deepcopy(model)))
    announce(contexts[0], size, versions(), trains, run_id=run_id, transport="simulated", sim_latency=network.latency,
             sim_bandwidth=network.bandwidth, sim_jitter=network.jitter, sim_apply=network.apply)
    contexts[0].checkpointer.begin(contexts[0])
    try:
        if layout.group_servers:
            bodies = _two_level_roles(scheduler, network, contexts, flats, data)
        else:
            bodies = [start_role(ctx, flat, data) for ctx, flat in zip(contexts, flats)]
        tasks = [scheduler.spawn(ctx.name, body) for ctx, body in zip(contexts, bodies)]
        scheduler.run()
    finally:
        for ctx in contexts:
            ctx.log.close()
    workers = [t.result for t in tasks if isinstance(t.result, Worker)]
    why = judge_training(config.run_dir, sum(w.rejected for w in workers), sum(w.clock for w in workers))
    if why:
        raise TrainingFailed(why)
    return config.run_dir


def _two_level_roles(scheduler: Scheduler, network: Network, contexts: list[Context], flats, data) -> list:
    """Two levels of servers (mpips/runtime/levels.py run_two_levels, over in-process state): the
    workers profile in virtual time, the clock starts after, as in a job."""
    layout, cfg = contexts[0].layout, contexts[0].config
    times = np.full(layout.workers, np.nan)

    def profiler(ctx, flat):
        def body():
            shard = WorkerShard(data.x_train, data.y_train, ctx.index, layout.workers, cfg.seed)
            times[ctx.index] = profile(Worker(ctx, flat, ShardBudget(shard, 0, 1)), cfg.profile_iterations)
        return body

    for ctx, flat in zip(contexts, flats):
        if ctx.role == WORKER:
            scheduler.spawn(ctx.name + " profiling", profiler(ctx, flat))
    scheduler.run()
    for ctx in contexts:
        ctx.t0 = scheduler.now
    groups, ranks = decide_groups(contexts[0], times, None)

    levels = []
    for g, members in enumerate(groups):
        shared = SharedParameters(flats[0].n, 1, members)
        table = LocalControlTable.shared(layout.workers, 1)
        levels.append((shared, table, [layout.group_server_ranks[g]]))
    bodies = []
    for ctx, flat in zip(contexts, flats):
        if ctx.role not in (GROUP_SERVER, WORKER):
            bodies.append(start_role(global_level(ctx), flat, data))
            continue
        g = ctx.index if ctx.role == GROUP_SERVER else next(i for i, m in enumerate(groups) if ctx.index in m)
        shared, table, ranks_g = levels[g]
        store = LocalParameterStore(shared, scheduler, network.link(1, ctx.role, ctx.index),
                                    server=0 if ctx.role == GROUP_SERVER else None,
                                    world_server_ranks=ranks_g, sparse=cfg.compressor != "none")
        group = group_level(ctx, g, groups[g], store, LocalControlTable(table, scheduler, layout.workers, 1))
        if ctx.role == WORKER:
            bodies.append(start_role(group, flat, data))
        else:
            bodies.append(start_group_server(ctx, group, group_server(ctx, group, g, groups[g], ranks[g]), flat))
    return bodies


def versions() -> dict:
    return {"mpips": __version__, "torch": torch.__version__, "numpy": np.__version__,
            "mpi": "none (simulated: mpips/runtime/local_transport.py)", "python": platform.python_version(),
            "host": platform.node()}
