"""A run log in the formats other tools read.

    mpips export RUN --tensorboard DIR     # scalars for TensorBoard: tensorboard --logdir DIR
    mpips export RUN --trace FILE.json     # the per-worker timeline for Perfetto (ui.perfetto.dev) or chrome://tracing

TensorBoard: one event file per run in DIR/RUN-NAME, written with TensorBoard's
own writer (torch.utils.tensorboard): the test accuracy and loss at every
evaluation (eval/), and over time bins of the workers' iterations the mean
training loss, the throughput (samples/s), the share of time waiting at the
gate and the mean staleness (train/). Each scalar's step is the number of
updates applied by then; its wall time is the run's start plus the run's time
(virtual for `mpips simulate` runs), so TensorBoard's "Relative" axis is the
run's own clock. The settings are a text summary.

Trace: the Trace Event Format (JSON) that Perfetto and chrome://tracing open: a
process per role ("workers", "servers"), a thread per worker or server rank;
each worker iteration as its spans (wait at the gate, pull, compute, emulated
device time, push), each server step as an "apply" span; counters for the test
accuracy. Timestamps are microseconds of the run's clock (virtual for
simulated runs: `otherData.clock` says which).
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import h5py
import numpy as np

from ..io.log import LogError, RunLog

TIME_BINS = 200   # at most this many points per train/ scalar
WORKERS_PID, SERVERS_PID, EVALUATION_PID = 1, 2, 3


def _started(log: RunLog) -> float:
    with h5py.File(os.path.join(log.run_dir, "run.h5"), "r") as f:
        return float(f.attrs.get("started", 0.0))


def _updates_at(log: RunLog, times: np.ndarray) -> np.ndarray:
    """Updates (server 0's steps) applied by each of `times`."""
    ap = log.applies
    ap = ap[ap["server"] == 0]
    if not len(ap):
        return np.zeros(len(times), dtype=np.int64)
    order = np.argsort(ap["time"], kind="stable")
    at = np.searchsorted(ap["time"][order], times, side="right")
    steps = np.concatenate([[0], ap["step"][order]])
    return steps[at]


def train_bins(log: RunLog, bins: int = TIME_BINS) -> dict[str, np.ndarray]:
    """The workers' iterations in time bins (by when each ended): `end` of each
    bin, and per bin the mean training loss, samples/s, share of worker time
    spent waiting at the gate, mean iteration staleness (NaN: no iteration
    ended in the bin)."""
    it = log.iterations
    if not len(it):
        return {k: np.zeros(0) for k in ("end", "loss", "throughput", "wait_share", "staleness")}
    busy = it["wait"] + it["pull"] + it["compute"] + it["push"]
    ends = it["start"] + busy
    hi = float(ends.max())
    edges = np.linspace(0.0, hi, min(bins, len(it)) + 1)
    k = np.clip(np.searchsorted(edges, ends, side="left") - 1, 0, len(edges) - 2)
    n = np.bincount(k, minlength=len(edges) - 1).astype(float)
    width = np.diff(edges)
    ok = it["rejected"] == 0

    def mean(values):
        total = np.bincount(k, weights=values, minlength=len(edges) - 1)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(n > 0, total / n, np.nan)

    samples = np.bincount(k, weights=np.where(ok, it["batch"], 0), minlength=len(edges) - 1)
    wait = np.bincount(k, weights=it["wait"], minlength=len(edges) - 1)
    spent = np.bincount(k, weights=busy, minlength=len(edges) - 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return {"end": edges[1:], "loss": mean(np.where(ok, it["loss"], np.nan).astype(float)),
                "throughput": samples / width, "wait_share": np.where(spent > 0, wait / spent, np.nan),
                "staleness": mean(it["staleness"].astype(float))}


def tensorboard(log: RunLog, out_dir: str) -> str:
    """Write the run's scalars into out_dir/<run name>; returns that directory."""
    from torch.utils.tensorboard import SummaryWriter  # needs the tensorboard package

    where = os.path.join(out_dir, log.name)
    start = _started(log)
    clock = "virtual" if log.simulated else "wall-clock"
    with SummaryWriter(log_dir=where) as writer:
        ev = log.evaluations
        for row in ev:
            step, t = int(row["steps"]), start + float(row["time"])
            writer.add_scalar("eval/accuracy", float(row["accuracy"]), step, walltime=t)
            writer.add_scalar("eval/loss", float(row["loss"]), step, walltime=t)
        bins = train_bins(log)
        steps = _updates_at(log, bins["end"])
        for j, end in enumerate(bins["end"]):
            for name in ("loss", "throughput", "wait_share", "staleness"):
                value = float(bins[name][j])
                if np.isfinite(value):
                    writer.add_scalar(f"train/{name}", value, int(steps[j]), walltime=start + float(end))
        settings = "\n".join(f"    {k}: {v!r}" for k, v in sorted(log.config.items()))
        writer.add_text("run", f"{log.paradigm} run {log.name}: {log.model} on {log.dataset}, "
                               f"{log.layout['workers']} workers, {clock} time\n\n{settings}", 0, walltime=start)
    return where


def _span(name: str, pid: int, tid: int, start: float, dur: float, **args) -> dict:
    event = {"name": name, "ph": "X", "pid": pid, "tid": tid, "ts": round(start * 1e6, 3),
             "dur": round(max(dur, 0.0) * 1e6, 3)}
    if args:
        event["args"] = args
    return event


def trace_events(log: RunLog) -> list[dict]:
    """The run as trace events (the Trace Event Format's "X" spans, "C"
    counters and "M" names)."""
    layout = log.layout
    first_worker = layout["servers"] + layout.get("group_servers", 0)
    events: list[dict] = [
        {"name": "process_name", "ph": "M", "pid": WORKERS_PID, "args": {"name": "workers"}},
        {"name": "process_name", "ph": "M", "pid": SERVERS_PID, "args": {"name": "servers"}},
        {"name": "process_name", "ph": "M", "pid": EVALUATION_PID, "args": {"name": "evaluation"}},
    ]
    it = log.iterations
    for w in np.unique(it["worker"]).tolist():
        events.append({"name": "thread_name", "ph": "M", "pid": WORKERS_PID, "tid": w,
                       "args": {"name": f"worker {w} (rank {first_worker + w})"}})
    for row in it:
        w, t = int(row["worker"]), float(row["start"])
        args = {"iteration": int(row["iteration"]), "batch": int(row["batch"])}
        work = float(row["compute"]) - float(row["slowdown"])
        for name, dur in (("wait", row["wait"]), ("pull", row["pull"]), ("compute", work),
                          ("emulated device time", row["slowdown"]), ("push", row["push"])):
            dur = float(dur)
            if dur > 0:
                extra = {"staleness": int(row["staleness"]), "loss": float(row["loss"])} if name == "push" else {}
                events.append(_span(name, WORKERS_PID, w, t, dur, **args, **extra))
            t += dur
    ap = log.applies
    for s in np.unique(ap["server"]).tolist():
        role = "server" if s < layout["servers"] else "group server"
        events.append({"name": "thread_name", "ph": "M", "pid": SERVERS_PID, "tid": s,
                       "args": {"name": f"{role} (rank {s})"}})
    for row in ap:
        events.append(_span("apply", SERVERS_PID, int(row["server"]), float(row["time"]) - float(row["apply"]),
                            float(row["apply"]), step=int(row["step"]), pushes=int(row["pushes"])))
    for row in log.evaluations:
        events.append({"name": "test accuracy", "ph": "C", "pid": EVALUATION_PID, "ts": round(float(row["time"]) * 1e6, 3),
                       "args": {"accuracy": float(row["accuracy"])}})
    return events


def chrome_trace(log: RunLog, path: str) -> str:
    """Write the run's timeline as a trace JSON file; returns its path."""
    trace = {"traceEvents": trace_events(log), "displayTimeUnit": "ms",
             "otherData": {"run": log.name, "paradigm": log.paradigm,
                           "clock": "virtual (simulated)" if log.simulated else "wall"}}
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as fh:
        json.dump(trace, fh)
    return path


def main(argv=None, prog: str | None = None) -> int:
    p = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run", metavar="RUN", help="a run directory")
    p.add_argument("--tensorboard", metavar="DIR", help="write TensorBoard scalars into DIR/<run name>")
    p.add_argument("--trace", metavar="FILE.json", help="write the timeline as a Chrome/Perfetto trace")
    args = p.parse_args(argv)
    if not (args.tensorboard or args.trace):
        p.error("nothing to export: give --tensorboard DIR and/or --trace FILE.json")
    try:
        log = RunLog(args.run)
    except (LogError, FileNotFoundError) as e:
        print(f"export: {e}", file=sys.stderr)
        return 2
    try:
        if args.tensorboard:
            try:
                print(tensorboard(log, args.tensorboard))
            except ImportError:
                print("export: --tensorboard needs the tensorboard package (pip install tensorboard)",
                      file=sys.stderr)
                return 2
        if args.trace:
            print(chrome_trace(log, args.trace))
    except OSError as e:
        print(f"export: cannot write: {e.strerror or e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
