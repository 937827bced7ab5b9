"""Every available paradigm on the same job, in an emulated heterogeneous and a
homogeneous cluster: one table and the figures, from the runs' logs.

    python benchmarks/paradigms.py                      # defaults: under 15 min on 2 cores
    python benchmarks/paradigms.py --seeds 0,1,2 --epochs 20 --model lenet5
    python benchmarks/paradigms.py --simulate --workers 8 --seeds 0,1,2 --epochs 30 --name paradigms-8
                                                        # `make compare`: the emulated 8-worker cluster

Each cluster is one `mpips compare` (mpips/experiments/compare.py): every run
`mpiexec -n 1+G+4(+1) python -m mpips train --paradigm P ...` with the same
model, data, seed, sample budget (epochs) and cluster; paradigms keep their
own defaults (docs/paradigms.md). The runs go to --runs (not committed); the table
of both clusters (Markdown, CSV, JSON) and figures to benchmarks/results/paradigms*.
A run that fails is reported and left out; the others still count.

With `--simulate` every run is `mpips simulate` instead (the same roles in
virtual time, cross-validated against MPI in results/sim_vs_mpi.md): the
emulated cluster then has a core per rank, which this 2-core machine cannot
give 10 MPI ranks (results/fidelity.md). The seed papers' claims are checked
on the runs (claims.py): per claim, its value in every seed and a verdict.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import time

from claims import render_markdown as render_claims
from claims import verdicts
from common import MPI_ENV, RESULTS, write_results

from mpips.analysis.summarize import heterogeneity
from mpips.config import ConfigError
from mpips.experiments.compare import Comparison, OptionError, flags, parse_seeds, report
from mpips.paradigms import available

SERVERS = 1
CLUSTERS = ("heterogeneous", "homogeneous")


def cluster_settings(cluster: str, workers: int) -> dict:
    """Heterogeneous: half the workers at 1x, a quarter at 2x, the rest at 4x
    (1,1,2,4 for 4 workers; 1,1,1,1,2,2,4,4 for 8), plus a transient 4x
    straggler on worker 1 (iterations 30-49); homogeneous: none."""
    if cluster == "homogeneous":
        return {}
    factors = [1] * (workers // 2) + [2] * (workers // 4)
    factors += [4] * (workers - len(factors))
    return {"slowdown": ",".join(map(str, factors)), "straggler": "1:30:20:4"}


def settings(args, cluster: str) -> dict:
    """Train settings of every run on `cluster`."""
    data_dir = {"data_dir": args.data_dir} if args.data_dir else {}
    return {"servers": SERVERS, "workers": args.workers, "model": args.model, "dataset": args.dataset,
            **data_dir, "epochs": args.epochs, "lr": args.lr, "batch_size": args.batch_size,
            "eval_every": args.eval_every, "evaluator": True, "device_time": args.device_time,
            **cluster_settings(cluster, args.workers)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--paradigms", type=lambda s: s.split(","), default=available() + ["gssp+gdtopk"],
                   help="comma-separated paradigms, or PARADIGM+COMPRESSOR; "
                        "default: every available one and gssp+gdtopk")
    p.add_argument("--clusters", type=lambda s: s.split(","), default=list(CLUSTERS),
                   help=f"comma-separated, of {', '.join(CLUSTERS)}")
    p.add_argument("--seeds", default="0", help="comma-separated")
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--simulate", action="store_true", help="every run in the simulator (`mpips simulate`)")
    p.add_argument("--model", default="mlp")
    p.add_argument("--dataset", default="digits")
    p.add_argument("--data-dir", default="", help="for mnist and cifar10: where their files are")
    p.add_argument("--epochs", type=float, default=10.0)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--eval-every", type=float, default=0.25, help="epochs between evaluations")
    p.add_argument("--device-time", default="20ms", help="emulated device time of an iteration "
                   "(mpips/training/emulation.py): the cluster, not this machine's contention, sets the times")
    p.add_argument("--target", type=float, default=0.9, help="accuracy of the time-to-target column")
    p.add_argument("--runs", default="runs/compare", help="where the run directories go")
    p.add_argument("--name", default="paradigms", help="results/<name>.md|json|csv and results/<name>/")
    p.add_argument("--timeout", type=float, default=300, help="seconds one run may take")
    p.add_argument("--reuse", action="store_true",
                   help="keep runs already finished in --runs (to resume, or redo the table and figures)")
    args = p.parse_args(argv)
    unknown = [c for c in args.clusters if c not in CLUSTERS]
    if unknown:
        p.error(f"unknown cluster(s) {', '.join(unknown)}; allowed: {', '.join(CLUSTERS)}")
    os.environ.update(MPI_ENV)   # the runs' mpiexec: as root, oversubscribed (docs/environment.md)

    started = time.perf_counter()
    try:
        args.seeds = parse_seeds(args.seeds)
        comparisons = [Comparison(args.paradigms, args.seeds, settings(args, cluster), args.runs,
                                  simulate=args.simulate, timeout=args.timeout, reuse=args.reuse,
                                  prefix=cluster[:3] + "-")
                       for cluster in args.clusters]
    except (OptionError, ConfigError) as e:
        p.error(str(e))
    runs, failed = [], []
    for comparison in comparisons:
        done, bad = comparison.train()
        runs += done
        failed += bad
    if not runs:
        print("no run finished", file=sys.stderr)
        return 1
    out = os.path.join(RESULTS, args.name)
    shutil.rmtree(out, ignore_errors=True)
    result = report(runs, out, target=args.target, csv=out + ".csv")
    settings_ = {k: getattr(args, k) for k in ("paradigms", "clusters", "seeds", "workers", "simulate", "model",
                                               "dataset", "epochs", "lr", "batch_size", "eval_every", "target")}
    claims = verdicts(result.rows, {heterogeneity(settings(args, c)): c for c in args.clusters})
    reused = " (--reuse: runs trained earlier are kept, so the total is not their training time)" \
        if args.reuse else ""
    text = (f"Settings: {settings_}; {SERVERS} server + {args.workers} workers (GSSP: + its group servers), "
            + ("in the simulator (virtual times); " if args.simulate else "under mpiexec; ")
            + "clusters: " + "; ".join(f"{c}: `{' '.join(flags(cluster_settings(c, args.workers))) or 'no slowdown'}`"
                                       for c in args.clusters)
            + f". Total {time.perf_counter() - started:.0f} s{reused}.\n\n"
            + "## The seed papers' claims\n\n" + render_claims(claims)
            + "\n## Every run\n\n" + result.markdown
            + ("\nFailed runs:\n\n" + "\n".join(f"- {f}" for f in failed) + "\n" if failed else "")
            + "\n" + "\n".join(f"![{os.path.basename(f)}]({args.name}/{os.path.basename(f)})"
                               for f in result.figures
                               if os.path.basename(f) in ("time_to_target.png", "accuracy.png", "staleness.png")))
    write_results(args.name, {"settings": settings_, "claims": claims, "rows": result.rows, "failed": failed,
                              "figures": [os.path.relpath(f, RESULTS) for f in result.figures]}, text)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
