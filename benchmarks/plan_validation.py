"""Does `mpips plan` recommend the paradigm that is really fastest? On
held-out emulated clusters (1 server + 4 workers + the evaluator rank,
`--device-time`, each shape its own slowdowns and stragglers), per shape:

1. `mpiexec -n 6 python -m mpips plan` with the shape's flags: the probe
   measures the emulated cluster (it is never told the shape), then the
   search simulates every candidate over the seeds on the profile it wrote;
2. every candidate for real, an MPI job per seed (`mpiexec -n RANKS python -m
   mpips train`, the plan's own settings and the candidate's);
3. per candidate, predicted (the plan's mean over seeds) against measured
   (the jobs' mean) time to the target and final accuracy; whether the plan's
   first choice was the real best (the shortest measured mean time to the
   target, by final accuracy where none reached it), and its regret: the
   measured time of the recommended over that of the real best (1 = no regret).

    python benchmarks/plan_validation.py [--shapes mixed,one-slow,stragglers]
        [--candidates C,...] [--seeds 0,1] [--epochs 10] [--target 0.9] [--keep DIR]

Results: benchmarks/results/plan_validation.{md,json} (--name).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np
from common import mpiexec, table, write_results

from mpips.experiments.plan import Candidate, default_candidates
from mpips.io.log import RunLog
from mpips.runtime.layout import ranks_for
from mpips.config import load

# Held out: none is the probe's or a test's cluster. Factors per worker, stragglers for all.
SHAPES = {
    "mixed": {"slowdown": "1,1,2,4", "random_stragglers": ""},
    "one-slow": {"slowdown": "1,1,1,3", "random_stragglers": "0.01:10:4"},
    "stragglers": {"slowdown": "1,1,1,1", "random_stragglers": "0.05:5:4"},
}
WORKERS = 4


def job_flags(args, shape: str) -> list[str]:
    """The user's job: digits MLP on the emulated cluster `shape`, evaluated on an evaluator rank."""
    flags = ["--device-time", args.device_time, "--epochs", f"{args.epochs:g}", "--evaluator",
             "--eval-every", "0.5", "--workers", str(WORKERS), "--stall-timeout", "120"]
    for name, value in SHAPES[shape].items():
        if value:
            flags += ["--" + name.replace("_", "-"), value]
    return flags


def settings_of(flags: list[str]) -> dict:
    """--name value pairs (and bare --evaluator) as Config overrides."""
    out, k = {}, 0
    while k < len(flags):
        name = flags[k][2:].replace("-", "_")
        if k + 1 < len(flags) and not flags[k + 1].startswith("--"):
            out[name], k = flags[k + 1], k + 2
        else:
            out[name], k = True, k + 1
    return out


def real_run(flags: list[str], candidate: Candidate, seed: int, run_dir: str, target: float,
             timeout: float) -> dict:
    chosen = {**settings_of(flags), **candidate.settings, "seed": seed}
    ranks = ranks_for(load(None, chosen))
    cand = [a for k, v in candidate.settings.items() if k != "paradigm"
            for a in ("--" + k.replace("_", "-"), str(v))]
    began = time.time()
    mpiexec(ranks, ["-m", "mpips", "train", *flags, "--paradigm", candidate.settings["paradigm"], *cand,
                    "--seed", str(seed), "--run-dir", run_dir, "--overwrite"], timeout=timeout)
    log = RunLog(run_dir)
    s = log.summary()
    return {"time_to_target": log.time_to_accuracy(target), "final_accuracy": float(s["final_accuracy"]),
            "seconds": float(s["wall_seconds"]), "job_seconds": time.time() - began,
            "load_average": os.getloadavg()[0], "ranks": ranks}


def mean_time(runs: list[dict]) -> float | None:
    """Mean time to the target over seeds, None unless every seed reached it."""
    times = [r["time_to_target"] for r in runs]
    return None if any(t is None for t in times) else float(np.mean(times))


def best_of(per: dict[str, dict]) -> str:
    """The candidate with the shortest mean time to the target; by accuracy when none reached it."""
    reached = {n: v["time"] for n, v in per.items() if v["time"] is not None}
    if reached:
        return min(reached, key=reached.get)
    return max(per, key=lambda n: per[n]["accuracy"])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", default=",".join(SHAPES))
    p.add_argument("--candidates", default=",".join(default_candidates(WORKERS)))
    p.add_argument("--seeds", default="0,1")
    p.add_argument("--epochs", type=float, default=10.0)
    p.add_argument("--target", type=float, default=0.9)
    p.add_argument("--device-time", default="20ms")
    p.add_argument("--probe-seconds", type=float, default=60.0)
    p.add_argument("--timeout", type=float, default=600.0, help="seconds one MPI job may take")
    p.add_argument("--keep", default="", help="keep the plans and run logs in this directory")
    p.add_argument("--name", default="plan_validation", help="results/<name>.{md,json}")
    args = p.parse_args()
    shapes, seeds = args.shapes.split(","), [int(s) for s in args.seeds.split(",")]
    candidates = [Candidate.parse(c) for c in args.candidates.split(",")]
    began = time.time()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        where = args.keep or tmp
        for shape in shapes:
            flags = job_flags(args, shape)
            out = os.path.join(where, shape)
            t = time.time()
            mpiexec(1 + WORKERS + 1, ["-m", "mpips", "plan", *flags, "--probe-seconds", f"{args.probe_seconds:g}",
                                      "--target", f"{args.target:g}", "--candidates", args.candidates,
                                      "--seeds", args.seeds, "--out", out], timeout=args.timeout * 10)
            plan_seconds = time.time() - t
            with open(os.path.join(out, "plan.json")) as fh:
                plan = json.load(fh)
            measured = {c.name: [] for c in candidates}
            for seed in seeds:
                for c in candidates:   # interleaved: load drifts hit every candidate alike
                    run_dir = os.path.join(out, "real", f"{c.name.replace(':', '-').replace('=', '')}-s{seed}")
                    r = real_run(flags, c, seed, run_dir, args.target, args.timeout)
                    measured[c.name].append(r)
                    print(f"{shape} {c.name} seed {seed}: {r['time_to_target']} s to the target, accuracy "
                          f"{r['final_accuracy']:.3f} ({r['job_seconds']:.0f} s)", flush=True)
            per = {}
            for c in candidates:
                predicted = [r for r in plan["runs"] if r["candidate"] == c.name]
                per[c.name] = {"predicted_time": mean_time(predicted), "time": mean_time(measured[c.name]),
                               "predicted_accuracy": float(np.mean([r["final_accuracy"] for r in predicted])),
                               "accuracy": float(np.mean([r["final_accuracy"] for r in measured[c.name]])),
                               "stopped_early": sum(r["stopped_at"] > 0 for r in predicted),
                               "measured_runs": measured[c.name]}
            recommended, real_best = plan["recommended"]["candidate"], best_of(per)
            regret = (per[recommended]["time"] / per[real_best]["time"]
                      if per[recommended]["time"] and per[real_best]["time"] else None)
            results.append({"shape": shape, "flags": flags, "cluster": plan["cluster"], "plan_seconds": plan_seconds,
                            "recommended": recommended, "real_best": real_best, "top_is_best": recommended == real_best,
                            "regret": regret, "candidates": per})
            print(f"{shape}: recommended {recommended}, real best {real_best}, regret {regret}", flush=True)
    total = time.time() - began

    def cell(v, scale=1.0):
        return None if v is None else v * scale

    rows, summary = [], []
    for r in results:
        for name, v in r["candidates"].items():
            rows.append([r["shape"], name, cell(v["predicted_time"]), cell(v["time"]),
                         (v["time"] / v["predicted_time"]) if v["time"] and v["predicted_time"] else None,
                         100 * v["predicted_accuracy"], 100 * v["accuracy"], v["stopped_early"],
                         "recommended" if name == r["recommended"] else "",
                         "real best" if name == r["real_best"] else ""])
        summary.append([r["shape"], SHAPES[r["shape"]]["slowdown"], SHAPES[r["shape"]]["random_stragglers"] or "none",
                        r["recommended"], r["real_best"], "yes" if r["top_is_best"] else "no", r["regret"],
                        r["plan_seconds"]])
    md = (f"`mpips plan` on {len(results)} held-out emulated clusters of 1 server + {WORKERS} workers + the "
          f"evaluator rank (`--device-time {args.device_time}`, digits MLP, batch 16, {args.epochs:g} epochs, "
          f"target {100 * args.target:g}%, seeds {args.seeds}), then every candidate for real under MPI. The "
          f"plan probed each cluster itself ({args.probe_seconds:g} s) without being told its shape. This "
          f"invocation took {total / 60:.1f} min.\n\n"
          + table(["shape", "slowdown", "stragglers", "recommended", "real best", "top is best", "regret",
                   "plan s"], summary)
          + "\n\nPer candidate, predicted (simulated on the probed profile, mean over seeds) against measured "
            "(MPI jobs, mean over seeds); a time is missing where a seed never reached the target "
            "(or, predicted, was stopped early as hopeless):\n\n"
          + table(["shape", "candidate", "predicted s to target", "measured s", "measured / predicted",
                   "predicted acc % (at the stop, where stopped early)", "measured acc %", "stopped early",
                   "recommended", "real best"], rows)
          + "\n\nRegret: measured time to the target of the recommended candidate over that of the real best.")
    write_results(args.name, {"shapes": {s: SHAPES[s] for s in shapes}, "seeds": seeds, "epochs": args.epochs,
                              "target": args.target, "device_time": args.device_time,
                              "probe_seconds": args.probe_seconds, "total_seconds": total, "results": results}, md)


if __name__ == "__main__":
    sys.exit(main())
