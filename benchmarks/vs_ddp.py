"""mpips against allreduce: torch.distributed DDP (gloo) with the same model,
data, global batch and 4 workers, homogeneous and with slowdowns 1,1,2,4.

    python benchmarks/vs_ddp.py

DDP runs as a 4-rank job under the same mpiexec (rank and world from mpi4py,
rendezvous at MASTER_ADDR=127.0.0.1 / MASTER_PORT). Each rank trains on the
shard an mpips worker would own (`WorkerShard`), 16 samples per step, with
SGD at the mpips defaults; DDP's mean gradient equals BSP's sum of pushes
scaled 1/W. Slowdowns are emulated as mpips does: after computing, sleep
(factor - 1) x the compute time; in DDP the sleep sits in a communication hook,
so it falls between the backward pass and the allreduce. mpips runs 1 server
+ 4 workers (5 ranks; more where a paradigm needs group servers) on the same
cores as DDP's 4 ranks.

Homogeneous, DDP and BSP run twice each, alternating; heterogeneous, DDP and
every available paradigm run once each. Measured: samples/s (samples pushed / span from the common start to the last
iteration's end) and time to TARGET test accuracy (mpips: its evaluations,
every epoch of updates, on server 0 while training goes on; DDP: snapshots
taken at each epoch's end, evaluated after training, so evaluation costs DDP
nothing). Goals: BSP >= 0.9x DDP's samples/s homogeneous; the best paradigm
>= 1.5x DDP heterogeneous.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import socket
import sys
import tempfile
import time

import numpy as np
from common import mpiexec, run_inner, table, write_results

MODEL = "lenet5"
EPOCHS = 10         # the 90% target comes at about epoch 9; start-up, not training, dominates a run
SEED = 0
WORKERS = 4
TARGET = 0.90
SETTINGS = {"homogeneous": "", "heterogeneous": "1,1,2,4"}
GOAL_HOMOGENEOUS = 0.9
GOAL_HETEROGENEOUS = 1.5


class SlowStep:
    """State of `slowed_allreduce`: this rank's factor, its device time (None:
    its measured compute) and when its step began."""

    def __init__(self, factor: float, device_time: float | None = None):
        self.factor = factor
        self.device_time = device_time
        self.started = 0.0
        self.slept = True

    def begin(self) -> None:
        self.started = time.perf_counter()
        self.slept = False


def slowed_allreduce(state: SlowStep, bucket):
    """DDP communication hook: sleep (factor - 1) x this step's compute time
    (with a device time: until factor x it has passed since the step began),
    then allreduce as DDP does by default."""
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    if not state.slept:  # once per step, whatever the buckets
        elapsed = time.perf_counter() - state.started
        if state.device_time is not None:
            time.sleep(max(0.0, state.factor * state.device_time - elapsed))
        elif state.factor > 1:
            time.sleep((state.factor - 1) * elapsed)
    state.slept = True
    return allreduce_hook(None, bucket)


def ddp_inner(path: str, slowdown: str) -> None:
    import torch
    import torch.distributed as dist
    from mpi4py import MPI
    from torch.nn.parallel import DistributedDataParallel

    from mpips.config import Config
    from mpips.paradigms.base import iterations_per_epoch
    from mpips.training.data import WorkerShard, load_dataset
    from mpips.training.models import build_model

    comm = MPI.COMM_WORLD
    rank, world = comm.Get_rank(), comm.Get_size()
    dist.init_process_group("gloo", rank=rank, world_size=world)  # MASTER_ADDR/PORT from the env
    cfg = Config(model=MODEL, seed=SEED, slowdown=slowdown)
    torch.set_num_threads(cfg.torch_threads)
    data = load_dataset(cfg)
    torch.manual_seed(cfg.seed)
    model = build_model(MODEL, data.input_shape, data.num_classes)
    ddp = DistributedDataParallel(model)
    factors = cfg.slowdown_factors() or [1.0] * world
    step = SlowStep(factors[rank])
    ddp.register_comm_hook(step, slowed_allreduce)
    opt = torch.optim.SGD(ddp.parameters(), lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)
    shard = WorkerShard(data.x_train, data.y_train, rank, world, cfg.seed)
    ipe = iterations_per_epoch(len(data.y_train), world, cfg.batch_size)
    iterations = max(1, math.ceil(EPOCHS * ipe))
    loss_fn = torch.nn.CrossEntropyLoss()
    snapshots, starts = [], []
    comm.Barrier()
    t0 = comm.bcast(time.time() if rank == 0 else None)
    for it in range(iterations):
        starts.append(time.perf_counter())
        step.begin()
        x, y = shard.next_batch(cfg.batch_size)
        opt.zero_grad()
        loss_fn(ddp(x), y).backward()
        opt.step()
        if rank == 0 and (it + 1) % ipe == 0:
            snapshots.append((time.time() - t0, [p.detach().clone() for p in model.parameters()]))
    end = comm.gather(time.time() - t0)
    dist.destroy_process_group()
    if rank != 0:
        return
    curve = []
    model.eval()
    with torch.no_grad():
        for t, params in snapshots:
            for p, saved in zip(model.parameters(), params):
                p.copy_(saved)
            acc = float((model(data.x_test).argmax(1) == data.y_test).float().mean())
            curve.append((t, acc))
    wall = max(end)
    with open(path, "w") as fh:
        json.dump({"samples": iterations * world * cfg.batch_size, "wall": wall,
                   "samples_per_s": iterations * world * cfg.batch_size / wall,
                   "iteration_ms": 1e3 * float(np.median(np.diff(starts))),
                   "time_to_target": next((t for t, a in curve if a >= TARGET), None),
                   "final_accuracy": curve[-1][1] if curve else None, "curve": curve}, fh)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ddp(slowdown: str) -> dict:
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port())}
    return run_inner(__file__, WORKERS, "--slowdown", slowdown, timeout=400, env=env)


def ranks_for(paradigm: str) -> int:
    """World size that gives `paradigm` WORKERS workers (servers and any group servers first)."""
    from mpips.config import Config
    from mpips.runtime.layout import make_layout

    cfg = Config(paradigm=paradigm)
    for n in range(WORKERS + 1, WORKERS + 16):
        try:
            if make_layout(cfg, n).workers == WORKERS:
                return n
        except Exception:  # noqa: BLE001 - too few ranks for this paradigm's roles
            continue
    raise RuntimeError(f"no world size gives {paradigm} {WORKERS} workers")


def mpips_run(paradigm: str, slowdown: str, run_dir: str) -> dict:
    from mpips.io.log import RunLog

    flags = ["-m", "mpips", "train", "--paradigm", paradigm, "--model", MODEL, "--epochs", str(EPOCHS),
             "--seed", str(SEED), "--run-dir", run_dir]
    if slowdown:
        flags += ["--slowdown", slowdown]
    mpiexec(ranks_for(paradigm), flags, timeout=400)
    log = RunLog(run_dir)
    it = log.iterations
    ok = it[it["rejected"] == 0]
    busy = it["wait"] + it["pull"] + it["compute"] + it["push"]
    wall = float((it["start"] + busy).max())
    starts = [np.diff(np.sort(it["start"][it["worker"] == w])) for w in np.unique(it["worker"])]
    ev = log.evaluations
    return {"samples": int(ok["batch"].sum()), "wall": wall, "samples_per_s": float(ok["batch"].sum()) / wall,
            "iteration_ms": 1e3 * float(np.median(np.concatenate(starts))),
            "wait_share": float(it["wait"].sum() / busy.sum()),
            "time_to_target": log.time_to_accuracy(TARGET),
            "final_accuracy": float(ev["accuracy"][-1]) if len(ev) else None,
            "curve": [(float(t), float(a)) for t, a in zip(ev["time"], ev["accuracy"])]}


def schedule(paradigms: list[str]):
    """(setting, system) in running order: homogeneous, DDP and BSP twice
    each, alternating, so a drift in the machine's load shows in the spread of
    the repeated runs; heterogeneous, DDP and then every paradigm once."""
    yield from [("homogeneous", "ddp"), ("homogeneous", "bsp")] * 2
    yield ("heterogeneous", "ddp")
    yield from (("heterogeneous", name) for name in paradigms)


def pooled(runs: list[dict]) -> dict:
    """Medians over repeated runs of one system; a time to target only if
    every run reached it."""
    ok = [r for r in runs if "error" not in r]
    if not ok:
        return runs[0]
    out = {k: float(np.median([r[k] for r in ok])) for k in ok[0]
           if k not in ("curve", "time_to_target", "final_accuracy") and ok[0][k] is not None}
    times = [r["time_to_target"] for r in ok]
    out["time_to_target"] = float(np.median(times)) if None not in times else None
    out["final_accuracy"] = float(np.median([r["final_accuracy"] for r in ok]))
    out["runs"] = runs
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--inner", metavar="JSON", help=argparse.SUPPRESS)
    p.add_argument("--slowdown", default="", help=argparse.SUPPRESS)  # of the DDP job
    p.add_argument("--paradigms", help="comma-separated mpips paradigms for the heterogeneous "
                   "setting (default: every one in mpips.paradigms.available())")
    args = p.parse_args()
    if args.inner:
        return ddp_inner(args.inner, args.slowdown)
    from mpips.paradigms import available

    runs: dict[str, dict[str, list]] = {setting: {} for setting in SETTINGS}
    with tempfile.TemporaryDirectory() as tmp:
        for k, (setting, name) in enumerate(schedule(args.paradigms.split(",") if args.paradigms
                                                     else available())):
            slowdown = SETTINGS[setting]
            try:
                r = ddp(slowdown) if name == "ddp" else mpips_run(name, slowdown, os.path.join(tmp, str(k)))
            except RuntimeError as e:  # a paradigm that does not run in this set-up: say so
                r = {"error": str(e)[-2000:]}
                print(f"vs_ddp: {name} ({setting}) failed:\n{e}", file=sys.stderr)
            runs[setting].setdefault(name, []).append(r)
    results = {setting: {name: pooled(rs) for name, rs in by.items()} for setting, by in runs.items()}
    write_results("vs_ddp", {"target_accuracy": TARGET, "epochs": EPOCHS, "results": results,
                             **summarize(results)}, markdown(results))


def _speedup(ddp: dict, r: dict, key: str) -> float | None:
    if key == "samples_per_s":
        return r[key] / ddp[key]
    if r.get(key) is None or ddp.get(key) is None:
        return None
    return ddp[key] / r[key]  # times: DDP's over ours


def summarize(results: dict) -> dict:
    homo, het = results["homogeneous"], results["heterogeneous"]
    ours = {k: v for k, v in het.items() if k != "ddp" and "error" not in v}
    reached = {k: v for k, v in ours.items() if v["time_to_target"] is not None}
    best = min(reached, key=lambda k: reached[k]["time_to_target"]) if reached else None
    fastest = max(ours, key=lambda k: ours[k]["samples_per_s"]) if ours else None
    return {
        "bsp_vs_ddp_samples_per_s_homogeneous": _speedup(homo["ddp"], homo["bsp"], "samples_per_s")
        if "error" not in homo["bsp"] else None,
        "best_paradigm_heterogeneous": best,
        "best_vs_ddp_time_to_target_heterogeneous": _speedup(het["ddp"], het[best], "time_to_target")
        if best else None,
        "fastest_paradigm_heterogeneous": fastest,
        "fastest_vs_ddp_samples_per_s_heterogeneous": _speedup(het["ddp"], het[fastest], "samples_per_s")
        if fastest else None,
    }


def markdown(results: dict) -> str:
    rows = []
    for setting, runs in results.items():
        d = runs["ddp"]
        for name, r in runs.items():
            label = "DDP (gloo)" if name == "ddp" else f"mpips {name}"
            if "error" in r:
                rows.append([setting, label, "failed"] + [None] * 7)
                continue
            rows.append([setting, label, len(r["runs"]), r["samples_per_s"], _speedup(d, r, "samples_per_s"),
                         r["time_to_target"], _speedup(d, r, "time_to_target"), r["final_accuracy"],
                         r["iteration_ms"], 100 * r["wait_share"] if "wait_share" in r else None])
    s = summarize(results)

    def verdict(value, goal):
        if value is None:
            return "not measured"
        return f"{value:.2f} ({'met' if value >= goal else f'not met, {100 * (1 - value / goal):.1f}% short'})"

    return (f"LeNet-5 on digits, 4 workers x 16 samples, {EPOCHS} epochs, SGD lr 0.05 momentum 0.9; "
            f"slowdowns: {SETTINGS['heterogeneous']} in the heterogeneous setting.\n\n"
            + table(["setting", "system", "runs", "samples/s", "x DDP", f"s to {TARGET:.0%} acc",
                     "x DDP (speedup)", "final acc", "median iteration ms", "gate wait %"], rows)
            + "\n\nRepeated runs are pooled by their medians (the JSON has each run)."
            + "\n\n## Goals\n\n"
            + f"- mpips BSP samples/s / DDP, homogeneous (goal >= {GOAL_HOMOGENEOUS}): "
            + verdict(s["bsp_vs_ddp_samples_per_s_homogeneous"], GOAL_HOMOGENEOUS) + "\n"
            + f"- best paradigm by time to {TARGET:.0%} ({s['best_paradigm_heterogeneous']}), "
            f"speedup over DDP, heterogeneous (goal >= {GOAL_HETEROGENEOUS}): "
            + verdict(s["best_vs_ddp_time_to_target_heterogeneous"], GOAL_HETEROGENEOUS) + "\n"
            + f"- fastest paradigm by samples/s ({s['fastest_paradigm_heterogeneous']}), x DDP, "
            f"heterogeneous (goal >= {GOAL_HETEROGENEOUS}): "
            + verdict(s["fastest_vs_ddp_samples_per_s_heterogeneous"], GOAL_HETEROGENEOUS) + "\n")


if __name__ == "__main__":
    sys.exit(main())
