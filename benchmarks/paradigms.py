"""Every available paradigm on the same job, in an emulated heterogeneous and a
homogeneous cluster: one table and the figures, from the runs' logs.

    python benchmarks/paradigms.py                      # defaults: under 15 min on 2 cores
    python benchmarks/paradigms.py --seeds 0,1,2 --epochs 20 --model lenet5

Each run is `mpiexec -n 1+G+4 python -m mpips train --paradigm P ...` with the
same model, data, seed, sample budget (epochs) and cluster; paradigms keep
their own defaults (PARADIGMS.md). The runs go to --runs (not committed); the
table (Markdown, CSV, JSON) and figures to benchmarks/results/paradigms*.
A run that fails is reported and left out; the others still count.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import time

from common import RESULTS, mpiexec, write_results

from analysis.plot import plot_runs
from analysis.summarize import mean_rows, render_markdown, rows, write_csv
from mpips.config import Config
from mpips.io.log import RunLog
from mpips.paradigms import available

SERVERS, WORKERS = 1, 4
CLUSTERS = {
    # persistent 1,1,2,4 plus one transient straggler on a fast worker
    "heterogeneous": ["--slowdown", "1,1,2,4", "--straggler", "1:30:20:4"],
    "homogeneous": [],
}


# Runs beside each paradigm's defaults: name -> (paradigm, extra flags).
VARIANTS = {"gssp-gdtopk": ("gssp", ["--compressor", "gdtopk"])}


def setups(names: list[str]) -> list[tuple[str, str, list[str]]]:
    """(name, paradigm, extra flags) of each paradigm or variant named."""
    return [(n, *VARIANTS[n]) if n in VARIANTS else (n, n, []) for n in names]


def default_setups() -> list[str]:
    """Every available paradigm, and the variants of those."""
    return available() + [v for v, (p, _) in VARIANTS.items() if p in available()]


def ranks(paradigm: str) -> int:
    """Servers + workers + the evaluator, + one group server per group under GSSP."""
    return SERVERS + WORKERS + 1 + (Config().groups if paradigm == "gssp" else 0)


def train_flags(args, cluster: str, seed: int) -> list[str]:
    data_dir = ["--data-dir", args.data_dir] if args.data_dir else []
    return ["--servers", str(SERVERS), "--model", args.model, "--dataset", args.dataset, *data_dir,
            "--epochs", str(args.epochs), "--lr", str(args.lr), "--batch-size", str(args.batch_size),
            "--eval-every", str(args.eval_every), "--seed", str(seed), "--evaluator",
            "--device-time", args.device_time, *CLUSTERS[cluster]]


def failure_reason(output: str) -> str:
    """The line of a failed job's output that says why: the last one naming an
    error, else the last one that is not Open MPI's rule of dashes."""
    lines = [ln.strip() for ln in output.splitlines() if ln.strip().strip("-")]
    errors = [ln for ln in lines if "error" in ln.lower()]
    return (errors or lines or ["no output"])[-1]


def finished(run_dir: str) -> bool:
    try:
        return RunLog(run_dir).status == "finished"
    except (FileNotFoundError, OSError, KeyError):
        return False


def run_all(args) -> tuple[list[str], list[str]]:
    """Train every (seed, cluster, paradigm); returns (run dirs, failures)."""
    done, failed = [], []
    for seed in args.seeds:
        for cluster in args.clusters:
            for name, paradigm, extra in setups(args.paradigms):
                run_dir = os.path.join(args.runs, f"{cluster[:3]}-{name}-s{seed}")
                if args.reuse and finished(run_dir):
                    done.append(run_dir)
                    continue
                shutil.rmtree(run_dir, ignore_errors=True)
                cmd = ["-m", "mpips", "train", "--paradigm", paradigm, "--run-dir", run_dir,
                       *train_flags(args, cluster, seed), *extra]
                t = time.perf_counter()
                try:
                    mpiexec(ranks(paradigm), cmd, timeout=args.timeout)
                except (RuntimeError, OSError) as e:
                    failed.append(f"{run_dir}: {failure_reason(str(e))}")
                    print(f"FAILED {run_dir}\n{e}", flush=True)
                    continue
                done.append(run_dir)
                print(f"{run_dir}: {time.perf_counter() - t:.0f} s", flush=True)
    return done, failed


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--paradigms", type=lambda s: s.split(","), default=default_setups(),
                   help=f"comma-separated paradigms or variants ({', '.join(VARIANTS)}); "
                        f"default: every available one and its variants")
    p.add_argument("--clusters", type=lambda s: s.split(","), default=list(CLUSTERS),
                   help=f"comma-separated, of {', '.join(CLUSTERS)}")
    p.add_argument("--seeds", type=lambda s: [int(x) for x in s.split(",")], default=[0])
    p.add_argument("--model", default="mlp")
    p.add_argument("--dataset", default="digits")
    p.add_argument("--data-dir", default="", help="for mnist and cifar10: where their files are")
    p.add_argument("--epochs", type=float, default=10.0)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--eval-every", type=float, default=0.25, help="epochs between evaluations")
    p.add_argument("--device-time", default="20ms", help="emulated device time of an iteration "
                   "(mpips/experiments/emulation.py): the cluster, not this machine's contention, sets the times")
    p.add_argument("--target", type=float, default=0.9, help="accuracy of the time-to-target column")
    p.add_argument("--runs", default="runs/compare", help="where the run directories go")
    p.add_argument("--name", default="paradigms", help="results/<name>.md|json and results/<name>/")
    p.add_argument("--timeout", type=float, default=300, help="seconds one run may take")
    p.add_argument("--reuse", action="store_true",
                   help="keep runs already finished in --runs (to resume, or redo the table and figures)")
    args = p.parse_args(argv)
    unknown = [c for c in args.clusters if c not in CLUSTERS]
    if unknown:
        p.error(f"unknown cluster(s) {', '.join(unknown)}; allowed: {', '.join(CLUSTERS)}")

    started = time.perf_counter()
    runs, failed = run_all(args)
    if not runs:
        print("no run finished", file=sys.stderr)
        return 1
    out = os.path.join(RESULTS, args.name)
    shutil.rmtree(out, ignore_errors=True)
    table = rows(runs, args.target)
    write_csv(table, os.path.join(out + ".csv"))
    # a timeline and dynamics figure per run of the first seed; the others add to the summaries
    first_seed = [r for r in runs if r.endswith(f"-s{args.seeds[0]}")]
    figures = plot_runs(runs, out, target=args.target, per_run=first_seed)
    markdown = render_markdown(table, args.target)
    if len(args.seeds) > 1:
        markdown += f"\nMean over seeds {args.seeds}:\n\n" + render_markdown(mean_rows(table), args.target)
    settings = {k: getattr(args, k) for k in ("paradigms", "clusters", "seeds", "model", "dataset",
                                              "epochs", "lr", "batch_size", "eval_every", "target")}
    reused = " (--reuse: runs trained earlier are kept, so the total is not their training time)" \
        if args.reuse else ""
    text = (f"Settings: {settings}; {SERVERS} server + {WORKERS} workers (GSSP: + its group servers); "
            f"clusters: " + "; ".join(f"{c}: `{' '.join(f) or 'no slowdown'}`" for c, f in CLUSTERS.items())
            + f". Total {time.perf_counter() - started:.0f} s{reused}.\n\n" + markdown
            + ("\nFailed runs:\n\n" + "\n".join(f"- {f}" for f in failed) + "\n" if failed else "")
            + "\n" + "\n".join(f"![{os.path.basename(f)}]({args.name}/{os.path.basename(f)})"
                               for f in figures if os.path.basename(f) in ("time_to_target.png", "accuracy.png", "staleness.png")))
    write_results(args.name, {"settings": settings, "rows": table, "failed": failed,
                              "figures": [os.path.relpath(f, RESULTS) for f in figures]}, text)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
