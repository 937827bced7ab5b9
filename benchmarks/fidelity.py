"""Does the emulated cluster match its model? BSP and ASP with --device-time on
1 server + 8 workers (+ the evaluator rank), homogeneous and 1,1,1,1,2,2,4,4,
against the rates the model predicts:

    BSP: W x b / max_i T_i        (every round waits for the slowest worker)
    ASP: sum_i b / T_i            (every worker at its own pace)

with T_i = f_i x device time. A ratio measured/model near 1 with no overruns
means the machine's own speed (CPU contention of 10 ranks on 2 cores) no
longer shows in the timings; only then is a timing comparison believed.

    python benchmarks/fidelity.py [--device-time 20ms] [--epochs 10] [--seeds 0,1,2]
"""
from __future__ import annotations

import argparse
import os
import tempfile

import numpy as np
from common import mpiexec, table, write_results

from mpips.heterogeneity import parse_device_time
from mpips.io.log import RunLog

WORKERS, BATCH = 8, 16
CLUSTERS = {"homogeneous": [1.0] * WORKERS, "heterogeneous": [1, 1, 1, 1, 2, 2, 4, 4]}
GOAL = 0.9


def model_rate(paradigm: str, factors: list[float], seconds: float) -> float:
    t = np.asarray(factors) * seconds
    return WORKERS * BATCH / t.max() if paradigm == "bsp" else float((BATCH / t).sum())


def measured_rate(log: RunLog) -> float:
    """Samples pushed per second of training: from the first iteration's start
    to the last push."""
    it = log.iterations
    end = (it["start"] + it["wait"] + it["pull"] + it["compute"] + it["push"]).max()
    return float(it["batch"][it["rejected"] == 0].sum() / (end - it["start"].min()))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device-time", default="20ms")
    p.add_argument("--epochs", type=float, default=10)
    p.add_argument("--seeds", default="0,1,2")
    args = p.parse_args()
    seconds = parse_device_time(args.device_time, BATCH).seconds(BATCH)
    results, rows = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in [int(s) for s in args.seeds.split(",")]:
            for cluster, factors in CLUSTERS.items():
                for paradigm in ("bsp", "asp"):
                    run = os.path.join(tmp, f"{paradigm}-{cluster}-{seed}")
                    mpiexec(1 + WORKERS + 1, ["-m", "mpips", "train", "--run-dir", run, "--paradigm", paradigm,
                                              "--device-time", args.device_time, "--epochs", str(args.epochs),
                                              "--batch-size", str(BATCH), "--evaluator", "--eval-every", "1000",
                                              "--slowdown", ",".join(map(str, factors)), "--seed", str(seed)])
                    log = RunLog(run)
                    got, want = measured_rate(log), model_rate(paradigm, factors, seconds)
                    overruns = log.summary()["device_time_overruns"]
                    results.append({"seed": seed, "cluster": cluster, "paradigm": paradigm,
                                    "samples_per_second": got, "model": want, "ratio": got / want,
                                    "overruns": overruns, "iterations": int(len(log.iterations))})
                    rows.append([seed, cluster, paradigm, got, want, got / want, overruns])
                    print(rows[-1], flush=True)
    ratios = {(r["cluster"], r["paradigm"]): [] for r in results}
    for r in results:
        ratios[(r["cluster"], r["paradigm"])].append(r["ratio"])
    summary = [[c, p, float(np.min(v)), float(np.median(v)), "yes" if min(v) >= GOAL else "no"]
               for (c, p), v in ratios.items()]
    het_hom = {p: float(np.median(ratios[("heterogeneous", p)]) * model_rate(p, CLUSTERS["heterogeneous"], 1)
                        / (np.median(ratios[("homogeneous", p)]) * model_rate(p, CLUSTERS["homogeneous"], 1)))
               for p in ("bsp", "asp")}
    md = (f"1 server + {WORKERS} workers + the evaluator rank, `--device-time {args.device_time}`, batch {BATCH}, "
          f"{args.epochs:g} epochs of digits (global budget), seeds {args.seeds}. Model: BSP = W*b / max T_i, "
          f"ASP = sum b / T_i, T_i = f_i x {args.device_time}. Goal: measured >= {GOAL} x model, no overrun.\n\n"
          + table(["cluster", "paradigm", "min ratio", "median ratio", f">= {GOAL}"], summary)
          + "\n\nHeterogeneous over homogeneous rate (median): "
          + ", ".join(f"{p} {v:.3f} (model {model_rate(p, CLUSTERS['heterogeneous'], 1) / model_rate(p, CLUSTERS['homogeneous'], 1):.3f})"
                      for p, v in het_hom.items())
          + "\n\nEvery run:\n\n"
          + table(["seed", "cluster", "paradigm", "samples/s", "model", "ratio", "overruns"], rows))
    write_results("fidelity", {"device_time": args.device_time, "epochs": args.epochs, "runs": results,
                               "het_over_hom": het_hom}, md)


if __name__ == "__main__":
    main()
