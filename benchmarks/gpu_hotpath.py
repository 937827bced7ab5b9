"""The hot path on a GPU (#51): 4 BSP workers sharing one GPU against one
process at their global batch, this checkout against one from before a change,
with and without NVIDIA MPS.

    python3 benchmarks/gpu_hotpath.py --before DIR --progress FILE    # on the GPU machine
    python benchmarks/gpu_hotpath.py --render FILE      # results/gpu-hotpath.{json,md} here, from that run's FILE
    python benchmarks/gpu_hotpath.py --before DIR --device cpu --epochs 0.1 --rounds 1   # a dry run

DIR holds the package of the other checkout (`git archive COMMIT mpips | tar -x -C DIR`);
its jobs run with PYTHONPATH=DIR. The workload is gpu.py's `--workload mnist1d`
(26,000 MNIST-1D signals, the published CNN, 32 samples a worker). Each round
runs one process at the global batch (4 x 32), then the four mpips jobs
(before and after, each without and with MPS), the side that goes first
alternating between rounds, so a drift of the machine falls on both. Reported
per job: samples/s over the span to the last iteration's end, the median
iteration (consecutive starts of a worker), the median compute (copies and
forward/backward) and the rest of the iteration (gate wait, pull, push and
the framework between them), the medians over rounds.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile

import gpu
import numpy as np
from common import RESULTS, table, write_results

WORKERS = 4
COMPUTE = ("h2d", "forward_backward", "d2h")


def job(side: str, before: str, mps: bool, epochs: float, data_dir: str, run_dir: str) -> dict:
    env = {"PYTHONPATH": before} if side == "before" else None
    r = gpu.mpips_run("bsp", WORKERS, epochs, data_dir, run_dir, env=env)
    median = r["profile"]["median_ms"]
    r["compute_ms"] = sum(median[p] for p in COMPUTE)
    r["rest_ms"] = r["iteration_ms"] - r["compute_ms"]
    r.update(side=side, mps=mps)
    del r["curve"]
    return r


def measure(before: str, rounds: int, epochs: float, progress: gpu.Progress) -> None:
    import torch

    if gpu.DEVICE == "cuda" and not torch.cuda.is_available():
        sys.exit("gpu_hotpath.py: no CUDA device (torch.cuda.is_available() is False)")
    progress.put("environment", gpu.gpu_info())
    progress.put("settings", {"workers": WORKERS, "epochs": epochs, "rounds": rounds, "before": before,
                              "workload": gpu.WORK["label"], "batch_per_worker": gpu.BATCH})
    with tempfile.TemporaryDirectory() as tmp:
        data = gpu.load(tmp)
        runs = iter(range(1000))
        for r in range(rounds):
            single = gpu.attempt(progress, f"single/{r}", gpu.single, data, WORKERS * gpu.BATCH, epochs)
            single.pop("curve", None)
            sides = ("before", "after") if r % 2 == 0 else ("after", "before")
            for mps in (False, True):
                with gpu.mps() if mps else contextlib.nullcontext(True) as started:
                    if mps and not started:
                        progress.put(f"mps/{r}", {"started": False})
                        continue
                    for side in sides:
                        gpu.attempt(progress, f"mpips/{r}/{side}/{'mps' if mps else 'plain'}", job, side,
                                    before, mps, epochs, data_dir=tmp, run_dir=os.path.join(tmp, f"run{next(runs)}"))


def markdown(data: dict) -> str:
    singles = [v["samples_per_s"] for k, v in data.items() if k.startswith("single/") and "error" not in v]
    one = float(np.median(singles)) if singles else None
    rows = []
    for mps in ("plain", "mps"):
        for side in ("before", "after"):
            runs = [v for k, v in data.items() if k.startswith("mpips/") and k.endswith(f"/{side}/{mps}")]
            ok = [v for v in runs if "error" not in v]
            if not runs:
                continue
            if not ok:
                rows.append([side, "yes" if mps == "mps" else "no", "failed: " + runs[0]["error"].splitlines()[-1][:80]]
                            + [None] * 9)
                continue

            def med(key, runs=ok):
                return float(np.median([v[key] for v in runs]))
            parts = {p: float(np.median([v["profile"]["median_ms"][p] for v in ok])) for p in ("wait", "pull", "push")}
            rows.append([side, "yes" if mps == "mps" else "no", med("samples_per_s"),
                         med("samples_per_s") / one if one else None, med("iteration_ms"), med("compute_ms"),
                         med("rest_ms"), parts["wait"], parts["pull"], parts["push"], med("final_accuracy"),
                         f"{len(ok)}/{len(runs)}"])
    env, settings = data["environment"], data["settings"]
    return (f"{settings['workload']}; 1 server + {settings['workers']} BSP workers (`--device cuda`, "
            f"{settings['batch_per_worker']} samples a worker, {settings['epochs']:g} epochs) against one process at "
            f"the global batch ({one or 0:.0f} samples/s, median of {len(singles)}); {settings['rounds']} rounds, "
            f"medians over them. {env['gpu']}, {env['cpus']} CPU cores; torch {env['torch']}; {env['mpi']}.\n\n"
            + table(["checkout", "MPS", "samples/s", "x one process", "iteration ms", "compute ms",
                     "rest ms", "wait ms", "pull ms", "push ms", "final acc", "runs"], rows)
            + "\n\nCompute: the copies to and from the GPU and forward/backward (the log's h2d, d2h, "
              "compute); rest: the median iteration less the median compute (the gate's wait for the "
              "other workers and the server, pull, push, the framework between them).\n")


def render(path: str) -> None:
    with open(path) as fh:
        data = json.load(fh)
    data = {"benchmark": "gpu-hotpath", "command": "python3 benchmarks/gpu_hotpath.py --before DIR --progress "
            "progress.json (on the GPU machine), then python benchmarks/gpu_hotpath.py --render progress.json",
            **data}
    with open(os.path.join(RESULTS, "gpu-hotpath.json"), "w") as fh:
        json.dump(data, fh, indent=1)
    with open(os.path.join(RESULTS, "gpu-hotpath.md"), "w") as fh:
        fh.write(f"# gpu-hotpath\n\n`{data['command']}`; before: `{data['settings']['before']}`.\n\n"
                 + markdown(data))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--before", help="the package of the other checkout (a folder holding mpips/)")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--epochs", type=float, default=4.0)
    p.add_argument("--progress", help="write the results so far here after every job")
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"), help="cpu: a dry run of the script")
    p.add_argument("--render", metavar="PROGRESS", help="write results/gpu-hotpath.{json,md} from a --progress file")
    args = p.parse_args()
    if args.render:
        render(args.render)
        return
    if not args.before or not os.path.isdir(os.path.join(args.before, "mpips")):
        p.error("--before: a folder holding the other checkout's mpips/ package is required")
    gpu.DEVICE, gpu.WORK = args.device, gpu.WORKLOADS["mnist1d"]
    progress = gpu.Progress(args.progress)
    measure(os.path.abspath(args.before), args.rounds, args.epochs, progress)
    write_results("gpu-hotpath" if args.device == "cuda" else "gpu-hotpath-quick-cpu", progress.data,
                  markdown(progress.data))


if __name__ == "__main__":
    main()
