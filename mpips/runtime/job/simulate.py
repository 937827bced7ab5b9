"""`mpips simulate`: every role of a job in one process, in virtual time.

The roles are the MPI job's own (assemble.py: roles.start_role, levels.py's two levels of servers, the
paradigms, the budget, the device-time emulation), each a task of a
deterministic scheduler (mpips/runtime/transport/scheduler.py) over the in-process transport
(mpips/runtime/transport/local.py) instead of MPI windows. Gradients are really computed;
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

import torch

from ...config import Config, ConfigError
from ...io.log import RankLog, rank_file
from ...io.rundir import claim, default_run_dir, new_run_id, own_run_dir
from ...training.flatmodel import FlatModel
from ...training.models import workload
from ..layout import make_layout, ranks_for
from ..recovery.checkpointer import NoCheckpoints
from ..transport.local import LocalTransport, Network
from .assemble import TrainingFailed, announce, judge_training, make_plan, prepare, run, versions

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
    layout = make_layout(config, ranks_for(config))
    data, built, paradigm, ipe = prepare(config, layout, model=model, dataset=dataset)
    lock = own_run_dir(config.run_dir)    # last: bad input leaves no directory
    try:
        claim(config.run_dir, config.to_dict(), overwrite=config.overwrite)
        plan = make_plan(config, layout, paradigm, len(data.y_train), ipe, FlatModel(built).n, loss)
        network = Network(config.sim_latency, config.sim_bandwidth, config.sim_jitter, config.seed,
                          config.sim_apply, config.sim_apply_per_push)
        transport = LocalTransport(layout, network)
        run_id = new_run_id()
        announce(plan, 0, versions("none (simulated: mpips/runtime/transport/local.py)"),
                 workload(config, data, model, built), run_id=run_id, transport="simulated",
                 sim_latency=network.latency, sim_bandwidth=network.bandwidth, sim_jitter=network.jitter,
                 sim_apply=network.apply)
        size = layout.size
        # every log flushes by the wall clock: `size` of them in one process
        # would flush `size` times as often
        logs = {r: RankLog(rank_file(config.run_dir, r), r, flush_seconds=config.log_flush_seconds * size,
                           run_id=run_id) for r in range(size)}
        try:
            # every rank its own model, as every MPI rank (the same initial weights)
            counts = run(transport, plan, logs, {r: NoCheckpoints() for r in range(size)},
                         {r: FlatModel(copy.deepcopy(built)) for r in range(size)}, data)
        finally:
            for log in logs.values():
                log.close()
        why = judge_training(config.run_dir, *counts)
        if why:
            raise TrainingFailed(why)
        return config.run_dir
    finally:
        lock.release()
