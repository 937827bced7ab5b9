"""DSSP against SSP at either end of its range: how long do the fast workers wait?

    python benchmarks/dssp_wait.py                        # ranges [1,6] and [3,15], seed 0, 5-10 min
    python benchmarks/dssp_wait.py --ranges 3,15 --seeds 0,1

For each staleness range [s_L, s_H] and seed, trains the same job (1 server +
4 workers, slowdowns 1,1,2,4, same seed and epochs) under DSSP(s_L, s_H),
SSP(s_L) and SSP(s_H), interleaved, and reports from each run's log the total
gate wait of the fast workers (0 and 1), the wall time, the final accuracy,
the largest clock gap at a gate pass, the time to 90% accuracy, and for DSSP
the controller calls and the credits they granted. Results: benchmarks/results/dssp_wait.{md,json}.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # benchmarks/: common.py
from common import HERE, mpiexec, table, write_results  # noqa: E402

from mpips.io.log import RunLog

FAST = (0, 1)
CLUSTER = ["--servers", "1", "--slowdown", "1,1,2,4"]
# `python -m mpips` in the ranks, from any working directory
ENV = {"PYTHONPATH": os.pathsep.join(filter(None, [os.path.dirname(HERE), os.environ.get("PYTHONPATH")]))}


def methods(low: int, high: int) -> dict[str, list[str]]:
    return {f"DSSP [{low},{high}]": ["--paradigm", "dssp", "--staleness-low", str(low),
                                     "--staleness-high", str(high)],
            f"SSP({low})": ["--paradigm", "ssp", "--staleness", str(low)],
            f"SSP({high})": ["--paradigm", "ssp", "--staleness", str(high)]}


def measure(log: RunLog) -> dict:
    it, s = log.iterations, log.summary()
    calls = log.events("dssp_controller")
    r = np.array([c["r_star"] for c in calls])
    wait = float(it["wait"][np.isin(it["worker"], FAST)].sum())
    return {
        "fast_wait_s": wait,
        "wall_s": s["wall_seconds"],
        # the load of other processes stretches waits and wall alike: the share is steadier
        "fast_wait_share": wait / (len(FAST) * s["wall_seconds"]),
        "final_accuracy": s["final_accuracy"],
        "max_clock_gap": s["max_clock_gap"],
        "time_to_90_s": log.time_to_accuracy(0.90),
        "controller_calls": len(calls),
        "credits_granted": int(r.sum()),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ranges", default="1,6;3,15", help="s_L,s_H pairs separated by ';'")
    p.add_argument("--seeds", default="0", help="comma-separated seeds")
    p.add_argument("--epochs", type=float, default=10)
    p.add_argument("--lr", type=float, default=0.1)
    args = p.parse_args()
    ranges = [tuple(int(x) for x in r.split(",")) for r in args.ranges.split(";")]
    common = [*CLUSTER, "--epochs", str(args.epochs), "--lr", str(args.lr)]

    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in [int(s) for s in args.seeds.split(",")]:
            for low, high in ranges:
                for name, flags in methods(low, high).items():
                    run_dir = os.path.join(tmp, str(len(results)))
                    mpiexec(5, ["-m", "mpips", "train", "--run-dir", run_dir, "--seed", str(seed),
                                *common, *flags], env=ENV)
                    row = {"range": [low, high], "method": name, "seed": seed,
                           **measure(RunLog(run_dir))}
                    results.append(row)
                    print(row, flush=True)

    headers = ["range", "method", "seed", "fast workers' wait (s)", "share of wall", "wall (s)", "final acc",
               "max clock gap", "time to 90% (s)", "controller calls", "credits granted"]
    rows = [[f"[{r['range'][0]},{r['range'][1]}]", r["method"], r["seed"], r["fast_wait_s"],
             r["fast_wait_share"], r["wall_s"], r["final_accuracy"], r["max_clock_gap"], r["time_to_90_s"],
             r["controller_calls"] if r["method"].startswith("DSSP") else None,
             r["credits_granted"] if r["method"].startswith("DSSP") else None] for r in results]
    note = ("1 server + 4 workers, slowdowns 1,1,2,4, MLP on digits, "
            f"{args.epochs:g} epochs, lr {args.lr:g}. Fast workers = workers 0 and 1. "
            "Every worker runs the same number of iterations, so under any bounded "
            "staleness the run lasts about as long as the slowest worker's iterations, and "
            "the fast workers' total wait is about that minus their own compute, whatever "
            "the paradigm lets them run ahead. Wait and wall times are "
            "from one run each on a shared 2-core machine: compare within a range and "
            "seed, and expect differences of tens of percent from load alone.\n\n")
    write_results("dssp_wait", {"settings": {"cluster": CLUSTER, "epochs": args.epochs, "lr": args.lr,
                                             "ranges": ranges, "fast_workers": list(FAST)},
                                "runs": results}, note + table(headers, rows))


if __name__ == "__main__":
    main()
