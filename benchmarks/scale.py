"""The paradigms at 16, 64, 256 and 1,024 workers, in the simulator (`mpips simulate`).

    python benchmarks/scale.py                 # every paradigm at 16, 64, 256 and 1,024 workers
    python benchmarks/scale.py --keep          # redo the table and figures from runs/scale/ already there
    python benchmarks/scale.py --paradigms asp,ssp,dssp --lr 64:0.05,256:0.05 --name scale-async-lr
                                               # the same at other learning rates: results/scale-async-lr*
    python benchmarks/scale.py --seeds 0,1,2 --keep      # three seeds (seed 0's runs reused), one at 1,024

Every paradigm at its default settings plus `--evaluator` (GSSP: `--groups`
sqrt(W), see below), and asynchronous Local SGD with DyLU and delayed
Nesterov, N = W (claims.async_local_sgd: an entry's value `W` is the worker
count; entries as `mpips compare --paradigms` reads them), and ASP under the
bounded delay compensation (`--async-rule dc-adaptive --dc-clip 1`, the
per-push rule measured best at 32-64 workers in results/async-scale.md), MNIST-1D with the published CNN (cnn1d) on 256,000
signals (204,800 for training: one epoch is 50 rounds of BSP at 256 workers),
batch 16 per worker, device time 20 ms per iteration (the simulator's default),
on the shared-cluster mix of sim_common.py: 70% of the workers at 1x, 15% at
1.5x, 10% at 2x, 5% at 3x, persistent, plus transient 4x stragglers (1% of
iterations start one, mean 10 iterations). One seed (0) by default
(`--seeds 0,1,2`: the mean over seeds, with the spread of the final
accuracy; a run of a seed already in runs/NAME/ is reused with `--keep`). At
1,024 workers only the first seed (`--max-seeds 1024:1`): a run there is 16,384
samples x 400 rounds = 6.5M samples, 4x a run at 256 workers: 4.4-9.7 min
here, two at once (the 11 entries before ASP's dc-adaptive: 51 min for seed 0,
16 for each further seed).

The learning-rate rule: `--lr` is the learning rate of one update from W x 16
samples (pushes are scaled 1/W), and it grows as sqrt(W) up to 256 workers,
then holds: 0.05 at W=16, 0.1 at 64, 0.2 at 256 and 1,024. Measured on BSP's equivalent (4 workers at the same global
batch, 10 epochs; BSP is SGD on the global batch whatever W): at 4,096 a round,
lr 0.2 reaches 88.6% at epoch 4, 95.0% at 6, 96.6% at 8 and 97.3% at 10; lr 0.4
(linear scaling from W=64) 84.7%, 93.2%, 95.1% and 95.7%, slower and noisier. The budget (`--epochs`, global): 1.5 epochs at W=16
(1,200 rounds of BSP, 256 samples each), 3 at 64 (600 of 1,024), 8 at 256 (400
of 4,096), 32 at 1,024 (400 of 16,384): enough for BSP to pass 94% at every W,
at a cost that grows with W. At 1,024 the rate is held at 0.2 rather than sqrt's
0.4, slower and noisier already at 256's batch (above) and untried beyond; BSP
there passes 94% after 270 of its 400 rounds, as at 256, and ends at 96.9%.

Writes results/scale.json, results/scale.md and results/scale/*.png; the
runs' logs stay in runs/scale/ (not committed).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import sim_common  # noqa: E402
from common import RESULTS, table, write_results  # noqa: E402  (puts this checkout's mpips on the path)

from mpips.experiments.compare import parse_seeds  # noqa: E402
from mpips.experiments.setups import Setup, file_name  # noqa: E402

# entries PARADIGM[+COMPRESSOR][:SETTING=VALUE...]; a value W is the run's worker count
PARADIGMS = ("bsp", "asp", "ssp", "dssp", "gssp", "syncswitch", "lbbsp", "vsgd", "backup", "localsgd",
             "localsgd:local_mode=async:dylu=true:delayed_nesterov=W:outer_momentum=0.9",
             "asp:async_rule=dc-adaptive:dc_clip=1")
WORKERS = (16, 64, 256, 1024)
EPOCHS = {16: 1.5, 64: 3.0, 256: 8.0, 1024: 32.0}
LR_HELD_FROM = 256   # 0.05 x sqrt(min(W, 256) / 16)
LR: dict[int, float] = {}   # --lr: a worker count's own rate
MAX_SEEDS = {1024: 1}   # --max-seeds: at these worker counts, only the first N seeds
TARGETS = (0.90, 0.94)
DEVICE_TIME = 0.020   # s per iteration of 16 samples at 1x (the simulator's default)
BATCH = 16
# MNIST-1D with the published CNN: 256,000 signals, 204,800 for training, so one epoch is
# 50 rounds of BSP at 256 workers (4,096 samples a round)
WORKLOAD = {"dataset": "mnist1d", "model": "cnn1d", "mnist1d_samples": 256_000, "batch_size": BATCH}
NAME = "scale"   # --name: results/NAME.{md,json}, results/NAME/*.png, runs/NAME/
FIGURES = os.path.join(RESULTS, NAME)
RUNS = os.path.join(os.path.dirname(HERE), "runs", NAME)


def groups_for(workers: int) -> int:
    """GSSP's groups: sqrt(W), so groups and their size grow alike (4 of 4, 8 of 8, 16 of 16)."""
    return max(1, int(round(math.sqrt(workers))))


def lr_for(workers: int) -> float:
    """0.05 (the default) at 16 workers, times sqrt(W / 16) (global batch W x 16) up to LR_HELD_FROM."""
    return LR.get(workers, 0.05 * math.sqrt(min(workers, LR_HELD_FROM) / 16))


def seeds_at(workers: int, seeds: list[int]) -> list[int]:
    return seeds[:MAX_SEEDS.get(workers, len(seeds))]


def at(entry: str, workers: int) -> Setup:
    """An entry's settings at `workers` workers (a value W is their count)."""
    return Setup.parse(":".join(item[:-1] + str(workers) if item.endswith("=W") else item
                                for item in entry.split(":")))


def overrides(paradigm: str, workers: int, run_dir: str, seed: int) -> dict:
    epochs = EPOCHS[workers]
    o = {**WORKLOAD, **at(paradigm, workers).settings, "workers": workers, "epochs": epochs, "lr": lr_for(workers),
         "evaluator": True,
         "eval_every": epochs / 40, "seed": seed, "run_dir": run_dir, **sim_common.options(workers)}
    if paradigm == "gssp":
        o["groups"] = groups_for(workers)
    return o


def inner(paradigm: str, workers: int, run_dir: str, seed: int) -> dict:
    """One simulated job in this process; the simulator's wall time."""
    import contextlib
    import io

    from mpips.config import load
    from mpips.runtime.job.simulate import simulate

    shutil.rmtree(run_dir, ignore_errors=True)
    cfg = load(None, overrides(paradigm, workers, run_dir, seed))
    began = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        simulate(cfg)
    return {"simulator_wall_s": time.perf_counter() - began}


def run(paradigm: str, workers: int, seed: int, keep: bool) -> dict:
    run_dir = os.path.join(RUNS, f"w{workers}-{file_name(paradigm)}-s{seed}")
    stamp = os.path.join(run_dir, "scale.json")
    if keep and os.path.exists(stamp):
        with open(stamp) as fh:
            timing = json.load(fh)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "out.json")
            cmd = [sys.executable, os.path.abspath(__file__), "--inner", out, "--paradigms", paradigm,
                   "--workers", str(workers), "--epochs", f"{workers}:{EPOCHS[workers]:g}",
                   "--lr", f"{workers}:{lr_for(workers):g}", "--seed", str(seed), "--run-dir", run_dir]
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [os.path.dirname(HERE),
                                                                            os.environ.get("PYTHONPATH")]))}
            began = time.perf_counter()
            p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
            if p.returncode != 0:
                print(f"FAILED {paradigm} W={workers}:\n{p.stdout[-3000:]}", flush=True)
                return {"paradigm": paradigm, "workers": workers, "seed": seed, "failed": p.stdout[-2000:]}
            with open(out) as fh:
                timing = json.load(fh)
            timing["process_wall_s"] = time.perf_counter() - began
        with open(stamp, "w") as fh:
            json.dump(timing, fh)
    return {"paradigm": paradigm, "workers": workers, "seed": seed, **timing, **read(run_dir, workers)}


def read(run_dir: str, workers: int) -> dict:
    from mpips.io.log import RunLog

    log = RunLog(run_dir)
    s = log.summary()
    ev = log.evaluations
    rounds = s["pushes"] / workers
    out = {"run_dir": os.path.relpath(run_dir, os.path.dirname(HERE)),
           "groups": groups_for(workers) if s["paradigm"] == "gssp" else None,
           "epochs": EPOCHS[workers], "virtual_s": s["wall_seconds"], "final_accuracy": s["final_accuracy"],
           "best_accuracy": s["best_accuracy"], "updates": s["updates"], "pushes": s["pushes"],
           "samples": s["samples"], "samples_per_s": s["samples_per_second"],
           "wait_fraction": s["mean_wait_fraction"], "mean_staleness": s["mean_staleness"],
           "max_staleness": s["max_staleness"], "max_clock_gap": s["max_clock_gap"],
           # virtual seconds per W pushes, in units of the 1x device time: 1.0 = no waiting, no slowdown
           "round_time_per_device_time": s["wall_seconds"] / rounds / DEVICE_TIME if rounds else None,
           "curve": {"time": ev["time"].tolist(), "epoch": ev["epoch"].tolist(),
                     "accuracy": ev["accuracy"].tolist()}}
    for t in TARGETS:
        out[f"time_to_{int(100 * t)}"] = log.time_to_accuracy(t)
        out[f"epochs_to_{int(100 * t)}"] = log.epochs_to_accuracy(t)
    return out


def over_seeds(results: list[dict]) -> dict[tuple[str, int], dict]:
    """Each (paradigm, W) over its seeds that did not fail: the mean of every
    number (a time to target over the seeds that reached it), the final
    accuracy's min and max, how many seeds reached each target, the lowest
    seed's curve; "failed" where every seed failed."""
    runs: dict[tuple[str, int], list[dict]] = {}
    for r in results:
        runs.setdefault((r["paradigm"], r["workers"]), []).append(r)
    out = {}
    for key, rs in runs.items():
        ok = sorted((r for r in rs if "failed" not in r), key=lambda r: r["seed"])
        if not ok:
            out[key] = {"failed": rs[0]["failed"], "seeds": len(rs)}
            continue
        mean = {k: (None if not (vs := [r[k] for r in ok if r.get(k) is not None]) else
                    vs[0] if not isinstance(vs[0], (int, float)) else sum(vs) / len(vs))
                for k in ok[0] if k not in ("curve", "seed")}
        finals = [r["final_accuracy"] for r in ok]
        out[key] = {**mean, "curve": ok[0]["curve"], "seeds": len(rs), "failed_seeds": len(rs) - len(ok),
                    "final_min": min(finals), "final_max": max(finals),
                    **{f"reached_{int(100 * t)}": sum(r[f"time_to_{int(100 * t)}"] is not None for r in ok)
                       for t in TARGETS}}
    return out


def figures(results: list[dict], paradigms: list[str], workers: list[int]) -> list[str]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(FIGURES, exist_ok=True)
    by = {key: r for key, r in over_seeds(results).items() if "failed" not in r}
    names = []
    markers = "os^vDP*Xh"
    # a colour per entry: tab10's, then others (an eleventh entry drew in the first one's blue)
    colours = list(plt.get_cmap("tab10").colors) + ["black", "darkgoldenrod", "navy", "crimson"]

    def per_w(key, ylabel, fname, title, logy=False):
        fig, ax = plt.subplots(figsize=(10.4, 4.4))
        values = []
        for k, p in enumerate(paradigms):
            xs = [w for w in workers if (p, w) in by and by[(p, w)].get(key) is not None]
            values += [by[(p, w)][key] for w in xs]
            ax.plot(xs, [by[(p, w)][key] for w in xs], marker=markers[k % len(markers)], label=p, color=colours[k])
        ax.set_xscale("log", base=2)
        ax.set_xticks(workers, [str(w) for w in workers])
        if logy and values:
            ax.set_yscale("log" if min(values) > 0 else "symlog", **({} if min(values) > 0 else {"linthresh": 1}))
        ax.set_xlabel("workers")
        ax.set_ylabel(ylabel)
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3)
        # beside the axes: inside, twelve entries covered the lines
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
        fig.tight_layout()
        fig.savefig(os.path.join(FIGURES, fname), dpi=110)
        plt.close(fig)
        names.append(fname)

    for t in TARGETS:
        per_w(f"time_to_{int(100 * t)}", f"virtual seconds to {100 * t:.0f}% test accuracy",
              f"time_to_{int(100 * t)}.png", f"time to {100 * t:.0f}% (missing: not reached)", logy=True)
    per_w("final_accuracy", "final test accuracy", "final_accuracy.png", "final accuracy, same budget per W")
    per_w("mean_staleness", "mean iteration staleness", "staleness.png", "mean staleness of a push", logy=True)
    per_w("round_time_per_device_time", "virtual time per W pushes / 1x device time", "round_time.png",
          "time per round of W pushes (1 = no waiting at 1x)")

    fig, axes = plt.subplots(1, len(workers), figsize=(5 * len(workers), 5), sharey=True, squeeze=False)
    axes = axes[0]
    for ax, w in zip(axes, workers):
        for k, p in enumerate(paradigms):
            if (p, w) in by:
                c = by[(p, w)]["curve"]
                ax.plot(c["time"], c["accuracy"], label=p, marker=markers[k % len(markers)], markersize=3,
                        color=colours[k])
        ax.set_title(f"{w} workers, {EPOCHS[w]:g} epochs", fontsize=10)
        ax.set_xlabel("virtual seconds")
        ax.set_ylim(0, 1)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("test accuracy")
    fig.legend(*axes[0].get_legend_handles_labels(), fontsize=8, loc="lower center", ncol=4)   # under the panels
    fig.tight_layout(rect=(0, 0.16, 1, 1))
    fig.savefig(os.path.join(FIGURES, "accuracy.png"), dpi=110)
    plt.close(fig)
    names.append("accuracy.png")
    return names


def markdown(results: list[dict], paradigms: list[str], workers: list[int], figs: list[str], total: float,
             seeds: list[int]) -> str:
    by = over_seeds(results)

    def fmt(v, digits=2):
        return "-" if v is None else f"{v:.{digits}f}"

    def pct(v):
        return "-" if v is None else f"{100 * v:.1f}%"

    def time_to(r, t):   # the mean over the seeds that reached it, and how many did when not all
        reached, n = r.get(f"reached_{t}", 0), r["seeds"] - r.get("failed_seeds", 0)
        return fmt(r.get(f"time_to_{t}")) + (f" ({reached}/{n})" if 0 < reached < n else "")

    def final(r):
        spread = f" ({100 * r['final_min']:.1f}-{100 * r['final_max']:.1f})" if r["seeds"] > 1 else ""
        return pct(r.get("final_accuracy")) + spread

    low, high = (int(100 * t) for t in TARGETS)
    headers = ["paradigm"] + [f"to {t}% (s) W={w}" for t in (low, high) for w in workers] \
        + [f"final W={w}" for w in workers]
    rows = []
    for p in paradigms:
        row = [p + (" (G=" + "/".join(str(groups_for(w)) for w in workers) + ")" if p == "gssp" else "")]
        for cell in (lambda r: time_to(r, low), lambda r: time_to(r, high), final):
            for w in workers:
                r = by.get((p, w))
                row.append("" if r is None else "failed" if "failed" in r else cell(r))
        rows.append(row)
    main = table(headers, rows)

    headers2 = ["W", "paradigm", "seed", "epochs", "virtual (s)", f"to {low}% (s)", f"epochs to {low}%",
                f"to {high}% (s)", "final acc", "best acc", "updates", "samples/s", "round / T", "wait share", "mean stal.",
                "max stal.", "max clock gap", "sim wall (s)"]
    rows2 = []
    runs = {(r["paradigm"], r["workers"], r["seed"]): r for r in results}
    for w, p, seed in ((n, p, seed) for n in workers for p in paradigms for seed in seeds_at(n, seeds)):
        r = runs.get((p, w, seed))
        if not r or "failed" in r:
            rows2.append([w, p, seed, "failed"] + [""] * (len(headers2) - 4))
            continue
        rows2.append([w, p + (f" G={r['groups']}" if r["groups"] else ""), seed, r["epochs"], r["virtual_s"],
                      fmt(r[f"time_to_{low}"]), fmt(r[f"epochs_to_{low}"], 1), fmt(r[f"time_to_{high}"]),
                      pct(r["final_accuracy"]), pct(r["best_accuracy"]), r["updates"],
                      f"{r['samples_per_s']:.0f}", fmt(r["round_time_per_device_time"]),
                      pct(r["wait_fraction"]), fmt(r["mean_staleness"], 1), r["max_staleness"],
                      r["max_clock_gap"], fmt(r["simulator_wall_s"], 1)])
    detail = table(headers2, rows2)
    settings = ("MNIST-1D (204,800 training and 51,200 test signals) with the published CNN (cnn1d), "
                "batch 16 per worker, lr " + ", ".join(f"W={w}: {lr_for(w):g}" for w in workers)
                + (f" (0.05 x sqrt(min(W, {LR_HELD_FROM})/16)" if not LR else " (set by --lr")
                + "; per update of W x 16 samples; pushes scaled 1/W), "
                "momentum 0.9 (asynchronous pushes: compensated, the default), device time 20 ms per iteration "
                "at 1x, `--evaluator`, "
                + (f"seed {seeds[0]}, one run each (the simulator is deterministic: another seed, another run; "
                   f"the spread over seeds is not measured)" if len(seeds) == 1 else
                   f"seeds {', '.join(map(str, seeds))}: the mean over seeds, the final accuracy's min-max in "
                   f"brackets, a time to target over the seeds that reached it (how many, when not all)"
                   + "".join(f"; at W={w} seed{'s' * (n > 1)} {', '.join(map(str, seeds_at(w, seeds)))} only"
                             for w, n in MAX_SEEDS.items() if w in workers and n < len(seeds)))
                + ". Budget (`--epochs`, global): " + ", ".join(f"W={w}: {EPOCHS[w]:g}" for w in workers)
                + f". Cluster: {sim_common.DESCRIPTION}. GSSP: `--groups` sqrt(W) = "
                + ", ".join(str(groups_for(w)) for w in workers) + "; asynchronous Local SGD's `--delayed-nesterov` W; "
                "Local SGD's inner optimizer: SGD at the lr above, momentum 0.9; every other setting at its default. "
                f"Times are virtual seconds (the simulator's clock). The runs took {total / 60:.1f} min of wall time.")
    return (settings + "\n\n## Time to target and final accuracy\n\n" + main
            + "\n\n## Every run\n\n`round / T`: virtual time per W pushes over the 1x device time (1.00 = every "
            "worker computing at 1x all the time, no waiting); `wait share`: the workers' mean share of time "
            "at the gate; staleness: updates applied between a push's pull and the push.\n\n" + detail
            + "\n\n" + "\n".join(f"![{f}]({os.path.basename(FIGURES)}/{f})" for f in figs) + "\n")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--paradigms", default=",".join(PARADIGMS))
    p.add_argument("--workers", default=",".join(map(str, WORKERS)))
    p.add_argument("--seeds", default="0", help="seeds, as 0,1,2 or 0-2 [0]")
    p.add_argument("--epochs", default=",".join(f"{w}:{e:g}" for w, e in EPOCHS.items()),
                   help="the global budget per worker count, W:epochs,...")
    p.add_argument("--max-seeds", default=",".join(f"{w}:{n}" for w, n in MAX_SEEDS.items()),
                   help="at these worker counts only the first N seeds, W:N,... [1024:1: a run there is 4x one at 256]")
    p.add_argument("--lr", default="", help="learning rates per worker count, W:lr,... [0.05 x sqrt(min(W, 256)/16)]")
    p.add_argument("--name", default=NAME, help="results/NAME.{md,json}, results/NAME/, runs/NAME/ [scale]")
    p.add_argument("--parallel", type=int, default=2, help="simulations at once [2]")
    p.add_argument("--keep", action="store_true", help="reuse runs already in runs/scale/")
    p.add_argument("--notes", default=os.path.join(HERE, "scale_notes.md"),
                   help="the discussion appended to scale.md (hand-written from the numbers)")
    p.add_argument("--inner", default="", help=argparse.SUPPRESS)
    p.add_argument("--run-dir", default="", help=argparse.SUPPRESS)
    args = p.parse_args()
    paradigms = [x for x in args.paradigms.split(",") if x]
    workers = [int(x) for x in args.workers.split(",") if x]
    seeds = parse_seeds(args.seeds)
    try:
        for entry in paradigms:
            at(entry, workers[0])
    except ValueError as e:   # OptionError: one line naming the entry
        p.error(str(e))
    EPOCHS.update({int(w): float(e) for w, e in (item.split(":") for item in args.epochs.split(",") if item)})
    MAX_SEEDS.clear()
    MAX_SEEDS.update({int(w): int(n) for w, n in (item.split(":") for item in args.max_seeds.split(",") if item)})
    LR.update({int(w): float(x) for w, x in (item.split(":") for item in args.lr.split(",") if item)})
    global FIGURES, RUNS
    FIGURES = os.path.join(RESULTS, args.name)
    RUNS = os.path.join(os.path.dirname(HERE), "runs", args.name)

    if args.inner:
        result = inner(paradigms[0], workers[0], args.run_dir, seeds[0])
        with open(args.inner, "w") as fh:
            json.dump(result, fh)
        return 0

    # a seed at every W before the next seed, smallest W first: a broken set-up shows early;
    # --parallel simulations at once (each its own process and virtual clock: how many share
    # the machine changes only their wall time)
    steps = [(paradigm, w, seed) for seed in seeds for w in workers if seed in seeds_at(w, seeds)
             for paradigm in paradigms]
    with ThreadPoolExecutor(max_workers=args.parallel) as pool:
        results = list(pool.map(lambda step: run(*step, args.keep), steps))
    for r in results:
        if "failed" not in r:
            print(f"W={r['workers']:3d} s{r['seed']} {r['paradigm']:10s} final {100 * r['final_accuracy']:5.1f}%  to 90% "
                  f"{r['time_to_90'] if r['time_to_90'] is not None else '-'}  virtual {r['virtual_s']:.1f}s  "
                  f"sim {r['simulator_wall_s']:.1f}s", flush=True)
    # the runs' own wall time: with --keep, this invocation's is only the reading
    total = sum(r.get("simulator_wall_s", 0.0) for r in results)
    figs = figures(results, paradigms, workers)
    md = markdown(results, paradigms, workers, figs, total, seeds)
    if args.name == NAME and os.path.exists(args.notes):
        with open(args.notes) as fh:
            md += "\n" + fh.read()
    settings = {"paradigms": paradigms, "workers": workers, "epochs": EPOCHS, "lr": {w: lr_for(w) for w in workers}, **WORKLOAD,
                "device_time": "20ms", "seeds": seeds, "max_seeds": MAX_SEEDS, "targets": TARGETS, "cluster": sim_common.DESCRIPTION,
                "gssp_groups": {w: groups_for(w) for w in workers}, "total_wall_s": total}
    write_results(args.name, {"settings": settings, "results": results}, md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
