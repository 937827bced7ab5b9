"""`mpips simulate`: every role of a job in one process, in virtual time.

The roles are the MPI job's own (assemble.py: roles.start_role, levels.py's two levels of servers, the
paradigms, the budget, the device-time emulation), each a task of a
deterministic scheduler (mpips/runtime/transport/scheduler.py) over the in-process transport
(mpips/runtime/transport/local.py) instead of MPI windows. Gradients are really computed;
an iteration's compute takes the device-time model's virtual time
(`--device-time`, 20ms unless given; slowdowns and stragglers as under MPI),
pulls and pushes the network model's (`--sim-latency`, `--sim-bandwidth`,
`--sim-jitter`, per node `--sim-nodes`), a server's apply `--sim-apply` and the sum of its pushes.
The run log is the MPI job's (same files and schema, times virtual), so
`mpips info` and analysis/ read it unchanged. On one build and CPU a run is
bit-reproducible; on another CPU it keeps its schedule and its floats drift by
rounding; evaluating it never changes it (docs/simulator.md, "Reproducible where").
"""
from __future__ import annotations

import copy
import dataclasses
import sys

import torch

from ...config import Config, ConfigError
from ...io.log import RankLog
from ...io.rundir import RunDir, default_run_dir, new_run_id
from ...node_links import NodeLinks
from ...training.batched import BatchedGradients, batched_gradients
from ...training.flatmodel import FlatModel
from ...training.models import workload
from ..layout import make_layout, ranks_for
from ..recovery.checkpointer import NoCheckpoints
from ..transport.local import LocalTransport, Network
from .assemble import TrainingFailed, announce, judge_training, make_plan, prepare, setup_phase, versions
from .assemble import run as run_job

DEFAULT_DEVICE_TIME = "20ms"
# --sim-gradients auto: batched from this many workers on. Below, a call
# batches too few workers to pay for itself much, and the tests that compare
# a simulation with an MPI job or a replay bit for bit run there.
BATCHED_FROM = 32


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


def _gradients(config: Config, layout, model, loss, data) -> BatchedGradients | None:
    """The workers' batched gradients (training/batched.py), or None: each its own."""
    batched = config.sim_gradients == "batched" or (config.sim_gradients == "auto"
                                                    and layout.workers >= BATCHED_FROM)
    if not batched:
        return None
    flat = FlatModel(copy.deepcopy(model))
    b = config.batch_size
    return batched_gradients(model, loss or torch.nn.CrossEntropyLoss(), flat, data.x_train[:b], data.y_train[:b])


def _placement(layout, nodes: NodeLinks) -> dict:
    """Each rank's node as its host (`mpips info` and summarize show the
    layout by node), when the simulated cluster has nodes."""
    if not nodes.nodes:
        return {}
    return {"placement": layout.placement([f"node{nodes.node_of(*layout.role(rank)) + 1}"
                                           for rank in range(layout.size)])}


def simulate(config: Config, *, model=None, dataset=None, loss=None) -> str:
    """Run the job `config` describes in virtual time; returns the run directory.
    `model`, `dataset` (a data.Dataset), `loss`: a user's objects (mpips.simulate)."""
    config = simulated_config(config)
    torch.set_num_threads(config.torch_threads)
    config = dataclasses.replace(config, run_dir=config.run_dir or default_run_dir(config))
    layout = make_layout(config, ranks_for(config))
    nodes = NodeLinks.parse(config.sim_nodes)
    nodes.check(layout)
    if sys.stderr.isatty():   # (off a terminal its stderr holds only what went wrong, which scripts read)
        setup_phase(config, 0, "reading the data and building the model")
    data, built, paradigm, epoch_iterations = prepare(config, layout, model=model, dataset=dataset)
    with RunDir.open(config.run_dir) as run:   # last: bad input leaves no directory
        run.claim(config)
        plan = make_plan(config, layout, run, paradigm, len(data.y_train), epoch_iterations, FlatModel(built).n,
                         loss)
        network = Network(config.sim_latency, config.sim_bandwidth, config.sim_jitter, config.seed,
                          config.sim_apply, config.sim_apply_per_push, nodes)
        transport = LocalTransport(layout, network)
        run_id = new_run_id()
        announce(plan, 0, versions("none (simulated: mpips/runtime/transport/local.py)"),
                 workload(config, data, model, built), run_id=run_id, transport="simulated",
                 sim_latency=network.latency, sim_bandwidth=network.bandwidth, sim_jitter=network.jitter,
                 sim_apply=network.apply, **_placement(layout, nodes))
        size = layout.size
        # every log flushes by the wall clock: `size` of them in one process
        # would flush `size` times as often
        gradients = _gradients(config, layout, built, loss, data)
        logs = {r: RankLog(run.rank_file(r), r, flush_seconds=config.log_flush_seconds * size, run_id=run_id)
                for r in range(size)}
        try:
            # every rank its own model, as every MPI rank (the same initial weights)
            counts = run_job(transport, plan, logs, {r: NoCheckpoints() for r in range(size)},
                             {r: FlatModel(copy.deepcopy(built)) for r in range(size)}, data, gradients)
        finally:
            for log in logs.values():
                log.close()
        why = judge_training(run, *counts)
        if why:
            raise TrainingFailed(why)
        return config.run_dir
