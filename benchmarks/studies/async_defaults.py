"""Do the asynchronous paradigms' defaults train? ASP, SSP and Sync-Switch with
the asynchrony-compensated momentum (`--async-momentum compensated`, the
default: momentum max(0, 1 - W(1 - m)) at lr x (1 - that)/(1 - m)) against
the configured momentum and lr kept as set, beside BSP, on the homogeneous
emulated cluster of 1 server + 8 workers (+ the evaluator rank).

    python benchmarks/async_defaults.py [--seeds 0,1,2] [--epochs 20] [--schedule cosine]

Goal (issue: faithful runs): ASP and Sync-Switch >= 93% on digits in every
seed, Sync-Switch's final accuracy within 1 point of BSP's mean.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # benchmarks/: common.py
from common import mpiexec, table, write_results  # noqa: E402

from mpips.io.log import RunLog

WORKERS = 8
SETUPS = [("bsp", "whole-rounds"), ("asp", "compensated"), ("asp", "as-set"), ("ssp", "compensated"),
          ("ssp", "as-set"), ("syncswitch", "compensated"), ("syncswitch", "as-set")]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--epochs", type=float, default=20)
    p.add_argument("--schedule", default="cosine")
    p.add_argument("--device-time", default="20ms")
    args = p.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in seeds:
            for paradigm, rule in SETUPS:
                run = os.path.join(tmp, f"{paradigm}-{rule}-{seed}")
                flags = [] if paradigm == "bsp" else ["--async-momentum", rule]
                mpiexec(1 + WORKERS + 1, ["-m", "mpips", "train", "--run-dir", run, "--paradigm", paradigm,
                                          "--device-time", args.device_time, "--evaluator",
                                          "--epochs", str(args.epochs), "--lr-schedule", args.schedule,
                                          "--eval-every", "1", "--seed", str(seed), *flags])
                s = RunLog(run).summary()
                runs.append({"paradigm": paradigm, "momentum_rule": rule, "seed": seed,
                             "final_accuracy": s["final_accuracy"], "best_accuracy": s["best_accuracy"],
                             "wall_seconds": s["wall_seconds"], "mean_staleness": s["mean_staleness"],
                             "overruns": s["device_time_overruns"]})
                print(runs[-1], flush=True)
    bsp_mean = float(np.mean([r["final_accuracy"] for r in runs if r["paradigm"] == "bsp"]))
    rows = []
    for paradigm, rule in SETUPS:
        acc = [r["final_accuracy"] for r in runs if (r["paradigm"], r["momentum_rule"]) == (paradigm, rule)]
        rows.append([paradigm, rule, float(np.mean(acc)), float(np.min(acc)), float(np.max(acc)),
                     " ".join(f"{a:.3f}" for a in acc), 100 * (float(np.mean(acc)) - bsp_mean)])
    md = (f"1 server + {WORKERS} workers + the evaluator rank, homogeneous, `--device-time {args.device_time}`, "
          f"digits MLP, lr 0.05, momentum 0.9, {args.epochs:g} epochs (global budget), "
          f"`--lr-schedule {args.schedule}`, seeds {args.seeds}. Final test accuracy.\n\n"
          + table(["paradigm", "momentum rule", "mean", "min", "max", "per seed", "points vs BSP mean"], rows))
    write_results("async_defaults", {"epochs": args.epochs, "schedule": args.schedule, "runs": runs,
                                     "bsp_mean": bsp_mean}, md)


if __name__ == "__main__":
    main()
