"""A run's metrics from its log: the summary `mpips info` prints, the time to a target accuracy."""
from __future__ import annotations

from typing import Any

import numpy as np


def time_to_target(times, accuracies, target: float, evaluations: int = 1) -> float | None:
    """The time of the first evaluation at which the mean accuracy of it and
    the `evaluations` - 1 before it reached `target` (None if never).

    Why a mean: an asynchronous run's accuracy swings by 5-15 points between
    evaluations, so the first single evaluation at the target moves by whole
    evaluation intervals on the chance of a point; a prediction of it (mpips
    plan) can be right about the run and still wrong about that chance."""
    accuracies = np.asarray(accuracies, dtype=float)
    if evaluations < 1 or len(accuracies) < evaluations:
        return None
    means = np.convolve(accuracies, np.ones(evaluations) / evaluations, mode="valid")
    hit = np.flatnonzero(means >= target)
    return float(np.asarray(times)[hit[0] + evaluations - 1]) if hit.size else None


def summary(log) -> dict[str, Any]:
    """A run (a reader.RunLog) in one flat dict (what `python -m mpips info --json` prints)."""
    it, ev, ap = log.iterations, log.evaluations, log.applies
    wall = log.wall_seconds
    if wall is None:
        ends = [it["start"] + it["wait"] + it["pull"] + it["compute"] + it["push"]] if len(it) else []
        wall = float(max([e.max() for e in ends] + list(ev["time"][-1:]) + [0.0]))
    server0 = ap[ap["server"] == 0]
    steps = int(server0["step"].max()) if len(server0) else 0
    pushes = int(server0["total_pushes"].max()) if len(server0) else 0
    busy = {}
    for w in np.unique(it["worker"]):
        rows = it[it["worker"] == w]
        span = float((rows["start"] + rows["wait"] + rows["pull"] + rows["compute"]
                      + rows["push"]).max() - rows["start"].min())
        busy[int(w)] = float(rows["wait"].sum()) / span if span > 0 else 0.0
    samples = int(it["batch"][it["rejected"] == 0].sum()) if len(it) else 0
    whole = log.completeness()
    return {
        "run": log.name,
        "paradigm": log.paradigm,
        "model": log.model,
        "dataset": log.dataset,
        "clock": "virtual (simulated)" if log.simulated else "wall",
        "status": log.status,
        "complete": whole["complete"],
        "reason": whole["reason"],
        "servers": log.layout["servers"],
        "workers": log.layout["workers"],
        "nodes": len(log.by_node()) or None,
        "epochs": log.config["epochs"],
        "final_accuracy": float(ev["accuracy"][-1]) if len(ev) else None,
        "best_accuracy": float(ev["accuracy"].max()) if len(ev) else None,
        "final_loss": float(ev["loss"][-1]) if len(ev) else None,
        "updates": steps,
        "pushes": pushes,
        "iterations": int(len(it)),
        "samples": samples,
        "wall_seconds": wall,
        "updates_per_second": steps / wall if wall else 0.0,
        "samples_per_second": samples / wall if wall else 0.0,
        "mean_wait_fraction": float(np.mean(list(busy.values()))) if busy else 0.0,
        "mean_staleness": float(it["staleness"].mean()) if len(it) else 0.0,
        "max_staleness": int(it["staleness"].max()) if len(it) else 0,
        "max_clock_gap": int(it["clock_gap"].max()) if len(it) else 0,
        "rejected_pushes": int(it["rejected"].sum()) if len(it) else 0,
        "bytes_sent": int(it["bytes_sent"].sum()) if len(it) else 0,
        "device_time_overruns": int(it["overrun"].sum()) if len(it) else 0,
        # BSP with backup workers: pushes too late for their round, never applied
        "dropped_pushes": sum(e["server"] == 0 for e in log.events("dropped_push")),   # every server logs each
        # an async rule (async_rule): its mean factor and tau over the pushes it treated (None: none)
        "mean_async_factor": float(pu["factor"].mean()) if len(pu := log.pushes) else None,
        "mean_tau": float(pu["tau"].mean()) if len(pu) else None,
        # Local SGD: local steps per push (None: no local steps)
        "local_steps_per_push": (float(np.mean([e["local_steps"] for e in local]))
                                 if (local := log.events("local_push")) else None),
    }
