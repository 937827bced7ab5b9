"""What evaluating costs training: the same BSP run with 20 evaluations and
with one, on the evaluator rank (`--evaluator`) and inline on server 0.

    python benchmarks/evaluator_cost.py            # seeds 0-2, about 4 min

1 server + 4 workers, `--device-time 20ms`, 100 rounds (4.45 epochs of
digits; `--eval-every 0.22` is 20 evaluation points). The claim measured:
on the evaluator rank, 20 evaluations leave the run's wall time within 5% of
one (time-to-accuracy measures training); inline, each one pauses every
worker. A wall-time ratio of two runs moves with the machine's load, so it
is measured here, on an idle machine, and not asserted in a test
(tests/mpi/test_faithful.py checks what the evaluator rank reads).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # benchmarks/: common.py
sys.path.insert(0, HERE)
from common import mpiexec, table, write_results  # noqa: E402  (puts this checkout's mpips on the path)

from mpips.io.log import RunLog  # noqa: E402

GOAL = 0.05
COMMON = ["--paradigm", "bsp", "--device-time", "20ms", "--iterations", "100"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", default="0,1,2")
    args = p.parse_args()
    rows, results = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in [int(s) for s in args.seeds.split(",")]:
            for where, ranks, flags in (("evaluator", 6, ["--evaluator"]), ("inline", 5, [])):
                wall = {}
                for evals, every in ((20, "0.22"), (1, "100")):
                    run = os.path.join(tmp, f"{where}-{evals}-{seed}")
                    mpiexec(ranks, ["-m", "mpips", "train", "--run-dir", run, *COMMON, *flags,
                                    "--eval-every", every, "--seed", str(seed)])
                    wall[evals] = RunLog(run).wall_seconds
                ratio = wall[20] / wall[1]
                results.append({"seed": seed, "evaluation": where, "wall_20": wall[20], "wall_1": wall[1],
                                "ratio": ratio})
                rows.append([seed, where, wall[20], wall[1], ratio])
                print(rows[-1], flush=True)
    summary = []
    for where in ("evaluator", "inline"):
        r = [x["ratio"] for x in results if x["evaluation"] == where]
        summary.append([where, float(np.median(r)), float(np.max(np.abs(np.subtract(r, 1)))),
                        "yes" if where != "evaluator" or max(abs(x - 1) for x in r) <= GOAL else "no"])
    md = (f"BSP, 1 server + 4 workers, {' '.join(COMMON)}, seeds {args.seeds}: wall time with 20 evaluations "
          f"over wall time with 1. Goal (evaluator rank): within {GOAL:.0%} of 1.\n\n"
          + table(["evaluation", "median ratio", "max |ratio - 1|", "goal met"], summary)
          + "\n\nEvery run pair:\n\n" + table(["seed", "evaluation", "wall 20 evals (s)", "wall 1 eval (s)", "ratio"], rows))
    write_results("evaluator_cost", {"runs": results}, md)


if __name__ == "__main__":
    main()
