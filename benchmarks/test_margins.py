"""The margins of the test suite's accuracy thresholds (tests/thresholds.py):
each set-up's final accuracy over seeds 0-4, under the machine's default
kernels, under ATEN_CPU_CAPABILITY=avx2 and under that with MKL_CBWR=COMPATIBLE,
against its threshold.

    .venv/bin/python benchmarks/test_margins.py [--only NAME,...] [--seeds 0,1,2,3,4]

(--only measures those set-ups again into the results, keeping the others).

Writes results/test_margins.{json,md}. About 6 min on 2 cores (the MPI
jobs' torch imports most of it). Run it on an otherwise idle machine: the
MPI jobs' accuracy moves with the load, which is part of what it measures.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)

from benchmarks.common import machine, mpiexec, table, write_results  # noqa: E402
from mpips.io.log import RunLog  # noqa: E402
from tests.thresholds import SETUPS  # noqa: E402

# the machine's kernels; ATen's AVX2 ones; and MKL's matrix products in their
# conditional-reproducibility path as well (MKL_CBWR=COMPATIBLE), which round as
# another CPU's would: MKL picks its kernels by CPU (on AMD the same with or without
# ATEN_CPU_CAPABILITY), and its products are most of an MLP's float work
KERNELS = {"default": {}, "avx2": {"ATEN_CPU_CAPABILITY": "avx2"},
           "avx2+cbwr": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "COMPATIBLE"}}


def final_accuracy(name: str, seed: int, env: dict) -> float:
    setup = SETUPS[name]
    if setup.kind == "function":   # in a process of its own: the kernels are chosen at start-up
        module, function = setup.flags[0].split(":")
        code = f"import {module} as m; print(m.{function}({seed}))"
        p = subprocess.run([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, check=True,
                           env={**os.environ, "PYTHONPATH": ROOT, **env})
        return float(p.stdout.split()[-1])
    with tempfile.TemporaryDirectory() as tmp:
        argv = ["-m", "mpips", setup.kind, "--run-dir", os.path.join(tmp, "run"), "--seed", str(seed),
                *setup.flags]
        if setup.kind == "train":
            mpiexec(setup.ranks, argv, env=env)
        else:
            p = subprocess.run([sys.executable, *argv], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, env={**os.environ, **env})
            if p.returncode:
                raise RuntimeError(f"{name} seed {seed} exited {p.returncode}:\n{p.stdout[-3000:]}")
        return float(RunLog(os.path.join(tmp, "run")).summary()["final_accuracy"])


def measure(name: str, seeds: list[int]) -> dict:
    start = time.perf_counter()
    acc = {k: [final_accuracy(name, s, env) for s in seeds] for k, env in KERNELS.items()}
    low, high = min(min(v) for v in acc.values()), max(max(v) for v in acc.values())
    setup = SETUPS[name]
    return {"kind": setup.kind, "flags": list(setup.flags), "threshold": setup.threshold,
            "spread_limit": setup.spread, "seeds": seeds, "accuracy": acc, "min": low, "max": high,
            "margin": low - setup.threshold, "seconds": time.perf_counter() - start}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="set-ups, comma-separated, measured again into the "
                                               "results (default: all, anew)")
    ap.add_argument("--seeds", default="0,1,2,3,4")
    args = ap.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    results = {}
    if args.only:
        with open(os.path.join(ROOT, "benchmarks", "results", "test_margins.json")) as fh:
            results = json.load(fh)["setups"]
    for name in args.only.split(",") if args.only else SETUPS:
        results[name] = measure(name, seeds)
        print(name, results[name]["accuracy"], flush=True)
    for name, r in results.items():   # the thresholds as they are now
        setup = SETUPS[name]
        r.update(threshold=setup.threshold, spread_limit=setup.spread, margin=r["min"] - setup.threshold)
    rows = [[name, r["kind"], r["threshold"], r["min"], r["margin"], r["max"] - r["min"], r["spread_limit"] or "",
             *(" ".join(f"{a:.3f}" for a in r["accuracy"][k]) for k in KERNELS)]
            for name, r in sorted(results.items(), key=lambda kv: list(SETUPS).index(kv[0]))]
    md = ("`python benchmarks/test_margins.py` (seeds 0-4; kernels: the machine's default, "
          "ATEN_CPU_CAPABILITY=avx2, and that with MKL_CBWR=COMPATIBLE). "
          "The set-ups are tests/thresholds.py's; min is over every seed and kernel, spread "
          "= max - min (the limit where a test compares two runs).\n\n"
          + table(["set-up", "kind", "threshold", "min", "margin", "spread", "spread limit", *KERNELS], rows) + "\n")
    write_results("test_margins", {"machine": machine(), "setups": results}, md)


if __name__ == "__main__":
    main()
