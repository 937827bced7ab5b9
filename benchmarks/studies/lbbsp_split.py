"""LB-BSP's split of the global batch: its cost per round against the number of workers.

    python benchmarks/lbbsp_split.py
    PYTHONPATH=OTHER_CHECKOUT python benchmarks/lbbsp_split.py --name lbbsp_split-other   # another mpips

Every worker computes the round's split itself (`LBBSP.split`, once per
round), from the speeds its peers published: `balance.allocate` with every
speed distinct, as measured speeds are, global batch 16 per worker, cap 40
(both bounds bind). Median of REPEATS calls, after WARMUP, per worker count.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # benchmarks/: common.py
from common import stats, table, write_results  # noqa: E402  (puts this checkout's mpips on the path)

from mpips.paradigms import balance

WORKERS = (8, 64, 256, 1024)
REPEATS = 50
WARMUP = 5


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--name", default="lbbsp_split", help="results/NAME.md and .json")
    args = parser.parse_args()
    results, rows = {}, []
    for w in WORKERS:
        speeds = np.random.default_rng(w).lognormal(0, 1, w)
        seconds = []
        for i in range(WARMUP + REPEATS):
            t = time.perf_counter()
            balance.allocate(16 * w, speeds, cap=40)
            if i >= WARMUP:
                seconds.append(time.perf_counter() - t)
        results[w] = stats(seconds)
        rows.append([w, results[w]["median_us"], results[w]["p99_us"]])
    markdown = (f"`balance.allocate(16 W, speeds, cap=40)`, every speed distinct (lognormal), "
                f"{REPEATS} calls per worker count after {WARMUP}; `balance` from {balance.__file__}.\n\n"
                + table(["workers", "median (us)", "p99 (us)"], rows) + "\n")
    write_results(args.name, {"results": results}, markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
