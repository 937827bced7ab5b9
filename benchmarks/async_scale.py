"""The asynchronous paradigms' update rules against BSP, in the simulator: for
each workload, worker count and cluster, every (paradigm x async rule x
momentum rule x learning rate) of the grid beside BSP at the same sample
budget; final accuracy minus BSP's and time to the target over BSP's.

    python benchmarks/async_scale.py                      # the screen: published split, 8 and 32 workers
    python benchmarks/async_scale.py --workloads compare --workers 8,32 --rules none,dc-adaptive \\
        --momentum as-set --lr-factors 1                  # a narrower grid on make compare's set
    python benchmarks/async_scale.py --workloads published,compare --workers 8,32,64,256 --seeds 0,1,2 \\
        --clusters homogeneous,heterogeneous --paradigms asp,ssp,dssp,gssp,vsgd,syncswitch,\\
        localsgd:local_mode=async:dylu=true:delayed_nesterov=W:outer_momentum=0.9 --parallel 2   # the full grid (#50)

Workloads: `published`, the issue's case of a new user, MNIST-1D's published
4,000/1,000 split with the CNN at every default but the paradigm (lr 0.05,
batch 16, 30 epochs, at any W: what `mpips train` does); `compare`, `make
compare`'s job (26,000 signals, batch 32, lr 0.05 and 20 epochs at 8 workers,
both x sqrt(W / 8), the lr held from 64 workers on: benchmarks/paradigms.py).
Clusters: `none` (no slowdown, no stragglers: the default for `published`),
and paradigms.py's `homogeneous` and `heterogeneous` (A100 and V100 speeds;
the default for `compare`), both with random transient stragglers.

An entry of --paradigms is `mpips compare`'s (PARADIGM[:SETTING=VALUE...]; a
value W is the worker count); each is run with every async rule, momentum
rule and learning rate (--lr-factors times the workload's). Runs go to
--runs/<section>/ and are kept: a run finished earlier is not run again
(Comparison's reuse). A section (workload, W, cluster) of
results/<name>.{md,json} keeps every run of earlier calls; a call adds its
own (replacing the same entry and seed), so narrower calls, more seeds
for a few entries, add up to one report. The discussion is benchmarks/async_scale_notes.md.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys

from common import RESULTS, table, write_results
from paradigms import WORKLOADS as COMPARE_WORKLOADS
from paradigms import cluster_settings, scaled

from mpips.experiments.compare import Comparison, parse_seeds
from mpips.experiments.launch import Launches
from mpips.io.log import RunLog
from mpips.io.metrics import time_to_target

HERE = os.path.dirname(os.path.abspath(__file__))
RULES = ("none", "staleness", "delay-adaptive", "dc", "dc-adaptive")
MOMENTUM = ("compensated", "as-set")
CLUSTERS = ("none", "homogeneous", "heterogeneous")
EVALUATIONS = 40   # per run
LAST = 5           # evaluations averaged as the run's end (one evaluation of an oscillating run is a draw)


def published(workers: int) -> dict:
    """MNIST-1D's published split at `mpips train`'s defaults (any W)."""
    return {"dataset": "mnist1d", "model": "cnn1d", "batch_size": 16, "lr": 0.05, "epochs": 30.0, "target": 0.9}


def compare(workers: int) -> dict:
    """`make compare`'s job at `workers` (benchmarks/paradigms.py's `scaled`)."""
    return scaled(COMPARE_WORKLOADS["mnist1d"], workers)


WORKLOADS = {"published": (published, "none"), "compare": (compare, "heterogeneous")}


def entries(paradigms: list[str], rules: list[str], momentum: list[str], lr_factors: list[float],
            lr: float, workers: int) -> list[str]:
    """BSP, then every paradigm x rule x momentum rule x learning rate."""
    out = ["bsp"]
    for paradigm in paradigms:
        paradigm = ":".join(i[:-1] + str(workers) if i.endswith("=W") else i for i in paradigm.split(":"))
        for rule in rules:
            for m in momentum:
                for f in lr_factors:
                    out.append(f"{paradigm}:async_rule={rule}:async_momentum={m}:lr={lr * f:g}")
    return out


def measured(run_dir: str, target: float) -> dict:
    log = RunLog(run_dir)
    s, ev = log.summary(), log.evaluations
    return {"final": s["final_accuracy"], "best": s["best_accuracy"],
            "last": float(ev["accuracy"][-LAST:].mean()), "time_to_target": log.time_to_accuracy(target),
            "wall": s["wall_seconds"], "mean_tau": s["mean_tau"], "mean_factor": s["mean_async_factor"],
            "mean_staleness": s["mean_staleness"], "pushes": s["pushes"],
            "pushes_to_target": time_to_target(ev["pushes"], ev["accuracy"], target)}


def section(workload: str, workers: int, cluster: str, seeds: list[int], args, before: dict | None,
            grid=None) -> dict:
    """Run (or reuse) one section's grid (default: `entries` of the
    command line's); every run's measurements by entry and seed, added to
    those `before` (an earlier call's: a run of this call replaces the same
    entry and seed)."""
    make, _ = WORKLOADS[workload]
    work = make(workers)
    target = work.pop("target")
    if getattr(args, "target", None):
        target = args.target
    settings = {"servers": 1, "workers": workers, **work, "eval_every": work["epochs"] / EVALUATIONS,
                "evaluator": True, "device_time": "20ms",
                **({} if cluster == "none" else cluster_settings(cluster, workers))}
    name = f"{workload}-w{workers}-{cluster}"
    if grid is None:
        grid = entries(args.paradigms, args.rules, args.momentum, args.lr_factors, work["lr"], workers)
    comparison = Comparison(grid, seeds, settings, os.path.join(args.runs, name), simulate=True, reuse=True,
                            parallel=args.parallel, timeout=args.timeout)
    with Launches() as launches:
        lock = comparison.claim()
        try:
            done, failed = comparison.train(launches)
        finally:
            lock.release()
        if launches.stopped:   # the runs it did not finish are not failures of their settings: report nothing
            raise SystemExit(128 + launches.stopped)
    runs = {entry: dict(by_seed) for entry, by_seed in (before or {}).get("runs", {}).items()}
    for run_dir, entry in comparison.labels.items():
        seed = run_dir.rsplit("-s", 1)[1]
        runs.setdefault(entry, {})[seed] = measured(run_dir, target) if run_dir in done else {"failed": True}
    return {"section": name, "workload": workload, "workers": workers, "cluster": cluster,
            "settings": settings, "target": target, "runs": runs,
            "failed": sorted(set((before or {}).get("failed", [])) | set(failed))}


def _mean(values):
    values = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    return sum(values) / len(values) if values else None


KEYS = ("final", "best", "last", "time_to_target", "wall", "mean_tau", "mean_factor", "mean_staleness", "pushes",
        "pushes_to_target")


def rows(sec: dict) -> list[dict]:
    """Each entry over its seeds: means, spreads, and against BSP's mean over the same seeds."""
    bsp = sec["runs"].get("bsp", {})
    out = []
    for entry, by_seed in sec["runs"].items():
        ok = {seed: r for seed, r in by_seed.items() if not r.get("failed")}
        mean = {k: _mean([r.get(k) for r in ok.values()]) for k in KEYS}   # (pushes: since #50's DiLoCo grid)
        base = {k: _mean([bsp[seed].get(k) for seed in ok if seed in bsp and not bsp[seed].get("failed")])
                for k in ("final", "last", "time_to_target", "pushes", "pushes_to_target")}
        finals = [r["final"] for r in ok.values()]
        out.append({"entry": entry, "paradigm": entry.split(":")[0],
                    **dict(item.split("=") for item in entry.split(":")[1:]),
                    "seeds": sorted(by_seed, key=int), "failed": len(by_seed) - len(ok), **mean,
                    "final_min": min(finals, default=None), "final_max": max(finals, default=None),
                    "reached": sum(r["time_to_target"] is not None for r in ok.values()),
                    "final_vs_bsp": _minus(mean["final"], base["final"]),
                    "last_vs_bsp": _minus(mean["last"], base["last"]),
                    "time_vs_bsp": _over(mean["time_to_target"], base["time_to_target"]),
                    "bsp_pushes_over": _over(base["pushes"], mean["pushes"]),
                    "bsp_pushes_to_target_over": _over(base["pushes_to_target"], mean["pushes_to_target"])})
    return out


def _minus(a, b):
    return None if a is None or b is None else a - b


def _over(a, b):
    return a / b if a and b else None


def pct(v):
    return "" if v is None else f"{100 * v:.1f}"


def render(sec: dict) -> str:
    s = sec["settings"]
    head = (f"## {sec['workload']}, {sec['workers']} workers, cluster {sec['cluster']}\n\n"
            f"{s['dataset']} ({s.get('mnist1d_samples') or 'published split'}), {s['model']}, batch "
            f"{s['batch_size']}, {s['epochs']:g} epochs, base lr {s['lr']:g}; target "
            f"{100 * sec['target']:g}%. Rows by the mean of the last {LAST} evaluations (`last`) over "
            f"their seeds; `- BSP`: accuracy points against BSP's mean over the same seeds, `time/BSP` the "
            f"time to the target over BSP's.\n\n")
    return rendered(sec, head, ["entry", "seeds", "final", "final min-max", "last 5", "last - BSP", "final - BSP",
                                "best", "reached", "time/BSP", "mean tau", "mean factor"],
                    lambda r: [r["entry"], ",".join(r["seeds"]), pct(r["final"]), spread(r), pct(r["last"]),
                               pct(r["last_vs_bsp"]), pct(r["final_vs_bsp"]), pct(r["best"]), reached(r),
                               r["time_vs_bsp"], r["mean_tau"], r["mean_factor"]],
                    key=lambda r: (r["entry"] != "bsp", -(r["last"] or 0)))


def spread(r: dict) -> str:
    """A row's final accuracy over its seeds, min-max."""
    return f"{pct(r['final_min'])}-{pct(r['final_max'])}" if r["final_min"] is not None else ""


def reached(r: dict) -> str:
    return f"{r['reached']}/{len(r['seeds']) - r['failed']}"


def rendered(sec: dict, head: str, columns: list[str], cells, key) -> str:
    """`head`, a table of the section's rows (`cells(row)`, in the order of `key`), its failed runs."""
    body = table(columns, [cells(r) for r in sorted(rows(sec), key=key)])
    failed = "".join(f"\n- failed: {f}" for f in sec["failed"])
    return head + body + failed + "\n"


def setting_of(entry: str, lr: float) -> str:
    """An entry as the same setting at every worker count: its learning rate
    as a factor of the workload's `lr` (none when 1), a value that was W as W."""
    items = []
    for i in entry.split(":"):
        if i.startswith("lr="):
            factor = float(i[3:]) / lr   # (entries() writes lr with 6 digits)
            if not math.isclose(factor, 1.0, rel_tol=1e-5):
                items.append(f"lr=x{factor:g}")
        else:
            items.append(re.sub(r"^(delayed_nesterov)=\d+$", r"\1=W", i))
    return ":".join(items)


def verdicts(sections: list[dict]) -> str:
    """Per workload and cluster, each asynchronous setting against BSP at
    every worker count measured: final accuracy minus BSP's in points (the
    mean over seeds, then the min-max of the per-seed differences) and the
    time to the target over BSP's (mean over the seeds that reached it);
    "within 1 point" where the mean is at least BSP's - 1 at every W and no
    run failed."""
    out = []
    groups: dict[tuple, list[dict]] = {}
    for sec in sections:
        groups.setdefault((sec["workload"], sec["cluster"]), []).append(sec)
    for (workload, cluster), secs in sorted(groups.items()):
        secs = sorted(secs, key=lambda s: s["workers"])
        cells: dict[str, dict[int, str]] = {}
        within: dict[str, bool] = {}
        bsp_row = {}
        for sec in secs:
            w, bsp = sec["workers"], sec["runs"].get("bsp", {})
            finals = [r["final"] for r in bsp.values() if not r.get("failed")]
            bsp_row[w] = f"{pct(_mean(finals))} ({pct(min(finals))}-{pct(max(finals))})" if finals else ""
            for r in rows(sec):
                if r["entry"] == "bsp":
                    continue
                diffs = [run["final"] - bsp[seed]["final"] for seed, run in sec["runs"][r["entry"]].items()
                         if not run.get("failed") and seed in bsp and not bsp[seed].get("failed")]
                if not diffs:
                    continue
                mean = sum(diffs) / len(diffs)
                key = setting_of(r["entry"], sec["settings"]["lr"])
                time = "" if r["time_vs_bsp"] is None else f", time {r['time_vs_bsp']:.2f}x"
                failed = f", {r['failed']} failed" if r["failed"] else ""   # (diverged: no final accuracy)
                cells.setdefault(key, {})[w] = (f"{100 * mean:+.1f} ({100 * min(diffs):+.1f}..{100 * max(diffs):+.1f}, "
                                                f"{len(diffs)} seed{'s' * (len(diffs) != 1)}{failed}{time}, "
                                                f"{reached(r)} reached)")
                within[key] = within.get(key, True) and mean >= -0.01 - 1e-9 and not r["failed"]   # (-1.0, rounded)
        ws = [s["workers"] for s in secs]
        body = table(["setting", *(f"W={w}" for w in ws), "within 1 point"],
                     [["BSP, final %", *(bsp_row.get(w, "") for w in ws), ""]]
                     + [[key, *(cells[key].get(w, "") for w in ws),
                         ("yes" if within[key] else "no") + ("" if len(cells[key]) == len(ws) else " (not every W)")]
                        for key in sorted(cells)])
        out.append(f"### {workload}, cluster {cluster}\n\n{body}\n")
    return ("## Against BSP, by setting\n\nFinal accuracy minus BSP's, points: the mean over seeds "
            "(the per-seed differences' min..max, seeds, runs that failed (diverged: no final accuracy, and "
            "not within 1 point), time to the target over BSP's, seeds that reached it).\n\n" + "\n".join(out))


def main(argv=None) -> int:
    split = lambda s: [x for x in s.split(",") if x]   # noqa: E731
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workloads", type=split, default=["published"], help=f"of {', '.join(WORKLOADS)}")
    p.add_argument("--workers", type=lambda s: [int(x) for x in split(s)], default=[8, 32])
    p.add_argument("--clusters", type=split, default=None,
                   help=f"of {', '.join(CLUSTERS)}; default: each workload's own (published: none, "
                        f"compare: heterogeneous)")
    p.add_argument("--seeds", default="0")
    p.add_argument("--paradigms", type=split, default=["asp", "ssp"],
                   help="entries as mpips compare's (a value W: the worker count)")
    p.add_argument("--rules", type=split, default=list(RULES))
    p.add_argument("--momentum", type=split, default=list(MOMENTUM))
    p.add_argument("--lr-factors", type=lambda s: [float(x) for x in split(s)], default=[1.0, 0.5])
    p.add_argument("--parallel", type=int, default=1, help="simulations at once")
    p.add_argument("--timeout", type=float, default=3600, help="seconds one run may take")
    p.add_argument("--runs", default=os.path.join(os.path.dirname(HERE), "runs", "async-scale"))
    p.add_argument("--name", default="async-scale", help="results/<name>.{md,json}")
    args = p.parse_args(argv)
    for option, values, allowed in (("--workloads", args.workloads, WORKLOADS), ("--rules", args.rules, RULES),
                                    ("--momentum", args.momentum, MOMENTUM),
                                    ("--clusters", args.clusters or [], CLUSTERS)):
        bad = [v for v in values if v not in allowed]
        if bad:
            p.error(f"{option}: {', '.join(bad)}; allowed: {', '.join(allowed)}")
    seeds = parse_seeds(args.seeds)
    path = os.path.join(RESULTS, f"{args.name}.json")
    sections = {}
    if os.path.exists(path):
        with open(path) as fh:
            sections = {s["section"]: s for s in json.load(fh)["sections"]}
    for workload in args.workloads:
        for workers in args.workers:
            for cluster in args.clusters or [WORKLOADS[workload][1]]:
                name = f"{workload}-w{workers}-{cluster}"
                sections[name] = section(workload, workers, cluster, seeds, args, sections.get(name))
    ordered = sorted(sections.values(), key=lambda s: (s["workload"], s["cluster"], s["workers"]))
    for sec in ordered:
        sec["rows"] = rows(sec)
    notes = "The discussion and the chosen defaults: benchmarks/async_scale_notes.md.\n\n"
    write_results(args.name, {"sections": ordered}, notes + verdicts(ordered) + "\n" + "\n".join(render(s) for s in ordered))
    return 0


if __name__ == "__main__":
    sys.exit(main())
