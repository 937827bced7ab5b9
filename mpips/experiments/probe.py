"""`mpips plan`'s probe: measure the cluster a job will train on, with the
job's own model and data, under the user's launcher, and fit a
ClusterProfile (mpips/experiments/profile.py).

It is three short real runs of the job (mpips.train over the launch's ranks,
the time split evenly, each ended by --time-limit), read back from their
run logs; nothing is timed outside the runtime:

    batch b/2, BSP, dense   compute at b/2; applies of W pushes
    batch b,   ASP, top-k   compute at b; pushes of few bytes (the latency)
    batch 2b,  ASP, dense   compute at 2b; applies of about one push

- Device time: per worker and batch size the median `compute` (the real
  forward/backward, and the --device-time emulation's sleep when given);
  one shape a + c*b**p for the cluster, fitted to the medians each divided
  by the worker's own at b (linear, p = 1, unless another p fits more than
  2% better), and a slowdown per worker (its medians over the fastest's).
- Stragglers: per worker, an iteration more than STRAGGLE times its median
  is straggling; consecutive ones are one straggle; rate = straggles per
  iteration not already straggling (the emulation's own rule), length = their
  mean run, factor = the median of their ratios.
- Network: pulls and pushes, latency + bytes / bandwidth through the 10th
  percentile of the small (top-k) pushes and of the dense pulls and pushes;
  jitter from the median's excess over it (an exponential's median is ln 2
  of its mean).
- Applies: the `apply` column against `pushes`, a line through the medians
  per push count; the per-push part beyond moving a push's bytes.
"""
from __future__ import annotations

import dataclasses
import math
import os

import numpy as np

from ..config import Config
from ..training.emulation import DeviceTime
from .profile import Apply, ClusterProfile, Network, Stragglers, WorkerProfile

STRAGGLE = 1.5        # an iteration this many times its worker's median is straggling
LINEAR_UNLESS = 0.02  # keep p = 1 unless another p fits this much better (relative error)
LONG = 1e5            # epochs: the runs end by their time limit


def probe_settings(config: Config, seconds: float, out: str) -> list[Config]:
    """The probe's three runs of the job `config`: settings each (an evaluator
    rank, if the job has one, stays: the launch counts it; it evaluates at the end)."""
    b = config.batch_size
    runs = [(max(1, b // 2), "bsp", "none"), (b, "asp", "topk"), (2 * b, "asp", "none")]
    model = config.device_time_model()
    # '20ms' means 20 ms at the batch size: pinned to the job's, not each run's
    device_time = f"a={model.a!r}s,c={model.c!r}s,p={model.p!r}" if model else ""
    return [dataclasses.replace(
        config, batch_size=size, device_time=device_time, paradigm=paradigm, compressor=compressor, topk_ratio=0.01,
        time_limit=seconds / len(runs), epochs=LONG, iterations=0, budget="global",
        eval_every=LONG, seed=config.seed + k, run_dir=os.path.join(out, f"probe-{k}-{paradigm}-b{size}"),
        overwrite=True, checkpoint_every=0.0, lbbsp_refine=False)
        for k, (size, paradigm, compressor) in enumerate(runs)]


def run_probe(config: Config, comm, *, seconds: float, out: str) -> ClusterProfile | None:
    """Run the probe over `comm` (every rank); the fitted profile on rank 0, None elsewhere."""
    from ..io.log import RunLog
    from ..runtime.job import train

    run_dirs = []
    for c in probe_settings(config, seconds, out):
        run_dirs.append(train(c, comm))
        comm.Barrier()   # every rank has closed its log file (and rank 0 written run.h5)
    return fit([RunLog(d) for d in run_dirs]) if comm.Get_rank() == 0 else None


def fit(logs) -> ClusterProfile:
    """The profile from the probe's run logs (mpips.io.log.RunLog)."""
    n = int(logs[0].layout["parameters"])
    its = [log.iterations[log.iterations["rejected"] == 0] for log in logs]
    workers = int(logs[0].layout["workers"])
    shape, factors = device_time(its, workers)
    worker_stragglers = [stragglers([it[it["worker"] == w] for it in its]) for w in range(workers)]
    network = fit_network(its)
    return ClusterProfile(
        tuple(WorkerProfile(shape, f, s) for f, s in zip(factors, worker_stragglers)), network,
        fit_apply([log.applies for log, it in zip(logs, its) if (it["bytes_sent"] == 4 * n).all()],
                  4 * n / network.bandwidth))


def device_time(its: list[np.ndarray], workers: int) -> tuple[DeviceTime, list[float]]:
    """The fastest worker's model a + c*b**p and every worker's factor on it."""
    sizes = np.array([int(np.median(it["batch"])) for it in its], float)
    medians = np.array([[np.median(it["compute"][it["worker"] == w]) for it in its] for w in range(workers)])
    middle = int(np.argsort(sizes)[len(sizes) // 2])
    shape = np.median(medians / medians[:, [middle]], axis=0)     # the cluster's curve, 1 at b
    scale = np.median(medians / shape, axis=1)                    # each worker's time at b
    fastest = scale.min()
    a, c, p = fit_curve(sizes, shape * fastest)
    return DeviceTime(a, c, p), [float(s / fastest) for s in scale]


def fit_curve(b: np.ndarray, t: np.ndarray) -> tuple[float, float, float]:
    """a, c >= 0 and p of a + c*b**p through the points (b, t), least
    relative squares; p = 1 unless another fits LINEAR_UNLESS better."""
    def best(p: float) -> tuple[float, float, float]:
        x = np.stack([np.ones_like(b), b ** p], axis=1) / t[:, None]   # relative: rows divided by t
        (a, c), *_ = np.linalg.lstsq(x, np.ones_like(t), rcond=None)
        if a < 0 or c < 0:   # the better one-term model
            fits = [(0.0, float(np.sum(b ** p * t) / np.sum(b ** (2 * p)))),
                    (float(np.mean(t)), 0.0)]
            a, c = min(fits, key=lambda ac: _error(b, t, *ac, p))
        return float(a), float(c), _error(b, t, a, c, p)

    a, c, linear = best(1.0)
    if len(np.unique(b)) < 3:
        return a, c, 1.0
    others = [(best(p), p) for p in np.arange(0.25, 2.001, 0.01)]
    (oa, oc, error), op = min(others, key=lambda o: o[0][2])
    if error < linear - LINEAR_UNLESS:
        return oa, oc, float(round(op, 2))
    return a, c, 1.0


def _error(b, t, a, c, p) -> float:
    """Largest relative error of the model at the points."""
    return float(np.max(np.abs(a + c * b ** p - t) / t))


def stragglers(runs: list[np.ndarray]) -> Stragglers:
    """One worker's transient stragglers from its iterations (in order) in each run."""
    starts = trials = slowed = 0
    ratios: list[float] = []
    for it in runs:
        order = np.argsort(it["iteration"], kind="stable")
        ratio = it["compute"][order] / np.median(it["compute"])
        slow = ratio > STRAGGLE
        begins = int(np.sum(slow & ~np.r_[False, slow[:-1]]))   # a slow one after a fast one
        starts += begins
        trials += int(np.sum(~slow)) + begins     # each iteration not in a straggle may start one
        slowed += int(np.sum(slow))
        ratios += ratio[slow].tolist()
    if not starts:
        return Stragglers()
    return Stragglers(rate=starts / trials, length=max(1.0, slowed / starts),
                      factor=max(1.0, float(np.median(ratios))))


def fit_network(its: list[np.ndarray]) -> Network:
    """latency + bytes / bandwidth through the small and the dense transfers, and the jitter."""
    dense = max(int(it["bytes_dense"].max()) for it in its)
    pulls = np.concatenate([it["pull"] for it in its])
    pushes = np.concatenate([it["push"] for it in its])
    sent = np.concatenate([it["bytes_sent"] for it in its])
    big = np.concatenate([pulls, pushes[sent == dense]])
    small, small_bytes = pushes[sent < dense], sent[sent < dense]
    floor_big = float(np.percentile(big, 10))
    if small.size:
        floor_small, nbytes = float(np.percentile(small, 10)), float(np.median(small_bytes))
    else:
        floor_small, nbytes = floor_big, float(dense)
    if floor_big > floor_small and dense > nbytes:
        bandwidth = (dense - nbytes) / (floor_big - floor_small)
        latency = max(0.0, floor_small - nbytes / bandwidth)
    else:   # no measurable cost per byte: all of it is latency
        bandwidth, latency = 1e12, min(floor_big, floor_small)
    excess = [np.median(x) - np.percentile(x, 10) for x in (big, small) if x.size]
    jitter = max(0.0, float(np.mean(excess)) / math.log(2))
    return Network(latency=latency, bandwidth=float(bandwidth), jitter=jitter)


def fit_apply(applies: list[np.ndarray], moving: float) -> Apply:
    """fixed + per_push x pushes through the median apply per push count;
    `moving`: the seconds of one push's bytes at the network's bandwidth,
    which the simulator charges apart."""
    ap = np.concatenate(applies) if applies else np.zeros(0)
    counts = np.unique(ap["pushes"]) if ap.size else []
    points = [(k, float(np.median(ap["apply"][ap["pushes"] == k]))) for k in counts if k > 0]
    if not points:
        return Apply()
    if len(points) == 1:
        k, t = points[0]
        return Apply(fixed=max(0.0, t - k * moving), per_push=0.0)
    k, t = np.array(points).T
    per_push, fixed = np.polyfit(k, t, 1)
    return Apply(fixed=max(0.0, float(fixed)), per_push=max(0.0, float(per_push) - moving))
