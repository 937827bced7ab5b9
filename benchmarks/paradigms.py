"""Every available paradigm on the same job, in an emulated heterogeneous and a
homogeneous cluster: one table and the figures, from the runs' logs.

    python benchmarks/paradigms.py --simulate --workers 8 --seeds 0,1,2 --name paradigms-8
                                          # `make compare`: MNIST-1D, 8 workers, 3 seeds
    python benchmarks/paradigms.py --simulate --workload mnist5k --workers 32 --seeds 0,1,2
    python benchmarks/paradigms.py        # under MPI, 4 workers, one seed (a core per rank is
                                          # what its times assume: results/fidelity.md)

A workload (WORKLOADS: MNIST-1D with the published CNN, real MNIST with
LeNet-5, or the digits smoke test) fixes the model, data, batch, learning rate,
epochs and target accuracy at 8 workers; at W workers the epochs grow as
sqrt(W / 8), and so does the learning rate up to 64 workers (held beyond).
Two clusters: two GPU generations side by side (A100 and V100 speeds, their
source below) and a homogeneous one, both with random transient
stragglers. Each cluster is one `mpips compare`
(mpips/experiments/compare.py) with every run the same model, data, seed,
sample budget (epochs) and cluster; paradigms keep their own defaults
(docs/paradigms.md). The runs go to --runs (not committed); the table of both
clusters (Markdown, CSV, JSON) and figures to benchmarks/results/<name>*. A run
that fails is reported and left out; the others still count.

With `--simulate` every run is `mpips simulate` instead (the same roles in
virtual time, cross-validated against MPI in results/sim_vs_mpi.md), --parallel
of them at once (their virtual times do not depend on it): the emulated cluster
then has a core per rank, which this 2-core machine cannot give 10 MPI ranks
(results/fidelity.md). The seed papers' claims are checked on the runs
(claims.py): per claim, its value in every seed and a verdict.
"""
from __future__ import annotations

import argparse
import math
import os
import shutil
import sys
import time

from claims import async_local_sgd, verdicts
from claims import render_markdown as render_claims
from common import MPI_ENV, RESULTS, write_results

from mpips.analysis.summarize import heterogeneity
from mpips.config import ConfigError
from mpips.experiments.compare import Comparison, OptionError, flags, parse_seeds, report
from mpips.experiments.launch import Launches
from mpips.paradigms import available

SERVERS = 1
CLUSTERS = ("heterogeneous", "homogeneous")

# The workloads (docs/paradigms.md, "Workloads"): each one's settings at 8 workers. At W
# workers the learning rate (of one update from W x batch samples; pushes are scaled 1/W)
# and the epochs both grow as sqrt(W / 8): a round is W x batch samples, so at a fixed
# epoch budget a larger W means fewer, larger updates (benchmarks/scale.py measured the
# sqrt rule against linear and constant ones). The learning rate stops growing at 64
# workers (LR_HELD_FROM): on MNIST-1D at 256, BSP at 0.05 x sqrt(32) = 0.28 collapsed
# mid-run in 2 seeds of 3 (final 39.5, 96.1, 10.4%), also under a cosine schedule (92.2,
# 44.9, 88.5%); at 64's 0.14 none did (93.8, 90.6, 93.7%: benchmarks/async_scale_notes.md).
LR_HELD_FROM = 64
WORKLOADS = {
    # MNIST-1D, the published CNN: 26,000 signals (20,800 for training: 20 rounds of
    # 32 x 32 at 32 workers); BSP at 8 workers reaches 93% by epoch 10, 96% by 20.
    "mnist1d": {"dataset": "mnist1d", "model": "cnn1d", "mnist1d_samples": 26000, "batch_size": 32,
                "lr": 0.05, "epochs": 20.0, "target": 0.93},
    # real MNIST (5,000 images, 4,000 for training), LeNet-5: BSP at 8 workers 94% by
    # epoch 6, 97% by 20 (lr 0.05 diverged: 31 updates an epoch with momentum 0.9).
    "mnist5k": {"dataset": "mnist5k", "model": "lenet5", "batch_size": 16, "lr": 0.01, "epochs": 20.0,
                "target": 0.95},
    # the smoke test (1,437 training images): not evidence, kept for a quick look
    "digits": {"dataset": "digits", "model": "mlp", "batch_size": 16, "lr": 0.05, "epochs": 10.0,
               "target": 0.9},
}

# Persistent speeds of two GPU generations side by side, as in a shared cluster that
# grew over time: ResNet-50 v1.5 training on one GPU, mixed precision, NVIDIA's
# DeepLearningExamples (PyTorch/Classification/ConvNets/resnet50v1.5/README.md,
# pytorch-21.03 container): A100 80GB 2,470 images/s, V100 16GB 1,200, so a V100
# worker is 2470 / 1200 = 2.06x slower.
GENERATIONS = (("A100", 1.0), ("V100", 2470 / 1200))
# transient stragglers on every cluster (a shared machine's other jobs): each
# iteration starts a 4x straggle with probability 1%, 10 iterations long on average
RANDOM_STRAGGLERS = "0.01:10:4"


def cluster_settings(cluster: str, workers: int) -> dict:
    """Heterogeneous: the first half of the workers A100s, the rest V100s
    (GENERATIONS), plus the random stragglers; homogeneous: the random
    stragglers alone."""
    if cluster == "homogeneous":
        return {"random_stragglers": RANDOM_STRAGGLERS}
    half = workers // 2
    factors = [GENERATIONS[0][1]] * half + [GENERATIONS[1][1]] * (workers - half)
    return {"slowdown": ",".join(f"{f:.3g}" for f in factors), "random_stragglers": RANDOM_STRAGGLERS}


def scaled(workload: dict, workers: int) -> dict:
    """The workload's settings at `workers` workers: epochs x sqrt(W / 8), lr x
    sqrt(min(W, LR_HELD_FROM) / 8)."""
    return {**workload, "lr": workload["lr"] * math.sqrt(min(workers, LR_HELD_FROM) / 8),
            "epochs": workload["epochs"] * math.sqrt(workers / 8)}


def settings(args, cluster: str) -> dict:
    """Train settings of every run on `cluster`."""
    data_dir = {"data_dir": args.data_dir} if args.data_dir else {}
    work = {k: v for k, v in args.work.items() if k != "target"}
    return {"servers": SERVERS, "workers": args.workers, **work, **data_dir,
            "eval_every": work["epochs"] / 40, "evaluator": True, "device_time": args.device_time,
            **cluster_settings(cluster, args.workers)}


def default_setups(workers: int) -> list[str]:
    """Every available paradigm at its defaults (localsgd: synchronous DiLoCo; backup: one
    backup worker), GSSP with GDTopK, and asynchronous Local SGD with DyLU and delayed
    Nesterov (claims.async_local_sgd), the claims' set-ups (docs/paradigms.md)."""
    return available() + ["gssp+gdtopk", async_local_sgd(workers)]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--paradigms", type=lambda s: s.split(","), default=None,
                   help="comma-separated entries PARADIGM[+COMPRESSOR][:SETTING=VALUE...] (as mpips compare's); "
                        "default: every available paradigm, gssp+gdtopk and asynchronous Local SGD "
                        "(claims.async_local_sgd: localsgd:local_mode=async:dylu=true:delayed_nesterov=W:outer_momentum=0.9)")
    p.add_argument("--clusters", type=lambda s: s.split(","), default=list(CLUSTERS),
                   help=f"comma-separated, of {', '.join(CLUSTERS)}")
    p.add_argument("--seeds", default="0", help="comma-separated")
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--simulate", action="store_true", help="every run in the simulator (`mpips simulate`)")
    p.add_argument("--parallel", type=int, default=2, help="with --simulate: runs at once")
    p.add_argument("--workload", choices=sorted(WORKLOADS), default="mnist1d",
                   help="dataset, model and their settings (WORKLOADS); the options below override them")
    for name in ("model", "dataset"):
        p.add_argument(f"--{name}", default=None)
    p.add_argument("--data-dir", default="", help="for mnist and cifar10: where their files are")
    for name in ("epochs", "lr", "target"):
        p.add_argument(f"--{name}", type=float, default=None)
    p.add_argument("--batch-size", type=int, default=None)
    p.add_argument("--device-time", default="20ms", help="emulated device time of an iteration "
                   "(mpips/training/emulation.py): the cluster, not this machine's contention, sets the times")
    p.add_argument("--runs", default="runs/compare", help="where the run directories go")
    p.add_argument("--name", default="paradigms", help="results/<name>.md|json|csv and results/<name>/")
    p.add_argument("--timeout", type=float, default=300, help="seconds one run may take")
    p.add_argument("--reuse", action="store_true",
                   help="keep runs already finished in --runs (to resume, or redo the table and figures)")
    args = p.parse_args(argv)
    unknown = [c for c in args.clusters if c not in CLUSTERS]
    if unknown:
        p.error(f"unknown cluster(s) {', '.join(unknown)}; allowed: {', '.join(CLUSTERS)}")
    given = {k: getattr(args, k) for k in ("model", "dataset", "epochs", "lr", "target", "batch_size")
             if getattr(args, k) is not None}
    args.work = {**scaled(WORKLOADS[args.workload], args.workers), **given}
    args.paradigms = args.paradigms or default_setups(args.workers)
    os.environ.update(MPI_ENV)   # the runs' mpiexec: as root, oversubscribed (docs/environment.md)

    started = time.perf_counter()
    try:
        args.seeds = parse_seeds(args.seeds)
        # (the benchmark's runs are its own: trained again over the last ones unless --reuse)
        comparisons = [Comparison(args.paradigms, args.seeds, {**settings(args, cluster), "overwrite": not args.reuse},
                                  args.runs,
                                  simulate=args.simulate, timeout=args.timeout, reuse=args.reuse, parallel=args.parallel,
                                  prefix=cluster[:3] + "-")
                       for cluster in args.clusters]
    except (OptionError, ConfigError) as e:
        p.error(str(e))
    runs, failed = [], []
    with Launches() as launches:
        for comparison in comparisons:
            try:
                lock = comparison.claim()
            except OptionError as e:
                p.error(str(e))
            try:
                done, bad = comparison.train(launches)
            finally:
                lock.release()
            runs += done
            failed += bad
        if launches.stopped:
            return 128 + launches.stopped
    if not runs:
        print("no run finished", file=sys.stderr)
        return 1
    out = os.path.join(RESULTS, args.name)
    shutil.rmtree(out, ignore_errors=True)
    labels = {run: name for comparison in comparisons for run, name in comparison.labels.items()}
    result = report(runs, out, target=args.work["target"], csv=out + ".csv", labels=labels)
    settings_ = {"workload": args.workload, **args.work,
                 **{k: getattr(args, k) for k in ("paradigms", "clusters", "seeds", "workers", "simulate")}}
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
