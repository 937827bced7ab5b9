"""DiLoCo's outer optimizer against BSP at the same sample budget, in the
simulator (#50): Local SGD's outer Nesterov step (--outer-lr x
--outer-momentum) over its inner SGD, and over the DiLoCo paper's inner
AdamW; final accuracy minus BSP's, and BSP's pushes over DiLoCo's (about H,
the local steps, if it holds).

    python benchmarks/diloco.py --workers 8 --seeds 0,1,2     # the whole grid at 8 workers
    python benchmarks/diloco.py --workers 32 --seeds 0,1 --outer 1:0,0.7:0.5,0.7:0.9 --adamw-lrs 0.003

results/diloco.md was made by calls that add up (cd benchmarks): `--workers 8
--seeds 0` (the whole grid); `--workers 8 --seeds 1 --outer
1:0,1:0.5,0.7:0.9,0.7:0.5,0.5:0.5 --adamw-lrs 0.003`; `--workers 8 --seeds 2
--outer 0.7:0.5,1:0,1:0.5 --adamw-lrs ""`; `--workers 32 --seeds 0 --outer
1:0,0.7:0.5,0.7:0.9 --adamw-lrs 0.003`; `--workers 32 --seeds 1 --outer
0.7:0.5,1:0,0.7:0.9 --adamw-lrs ""`.

The workload is async_scale.py's `published` (MNIST-1D's published split,
cnn1d, batch 16, lr 0.05 with momentum 0.9 for BSP and the inner SGD, 30
epochs, `--device-time 20ms`, no slowdown), so BSP's runs are the
asynchronous screen's. Every --outer pair LR:MOMENTUM is run over the inner
SGD, and --adamw-outer over the inner AdamW at each of --adamw-lrs (its
weight decay is --weight-decay's default, 0, as every run's). Runs go to
--runs/<section>/ and are kept (reused when finished with the same
settings); a section of results/diloco.{md,json} keeps the runs of earlier
calls, so calls with more seeds or pairs add up to one report.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

from async_scale import pct, reached, rendered, rows, section, spread
from common import RESULTS, write_results

from mpips.experiments.compare import parse_seeds

HERE = os.path.dirname(os.path.abspath(__file__))
OUTER = "1:0,1:0.5,0.7:0.9,0.5:0,0.5:0.5,0.5:0.9,0.7:0,0.7:0.5,1:0.9"   # (1, 0): Local SGD; (1, 0.5): SlowMo's
WITHIN = 0.01   # the claim: BSP's final accuracy within 1 point


def pair(text: str) -> tuple[float, float]:
    lr, _, momentum = text.partition(":")
    return float(lr), float(momentum)


def grid(outer: list[tuple[float, float]], adamw_lrs: list[float], adamw_outer: tuple[float, float]) -> list[str]:
    """BSP, then Local SGD at every outer pair over the inner SGD, then over the inner AdamW."""
    out = ["bsp"] + [f"localsgd:outer_lr={lr:g}:outer_momentum={m:g}" for lr, m in outer]
    lr, m = adamw_outer
    return out + [f"localsgd:optimizer=adam:lr={inner:g}:outer_lr={lr:g}:outer_momentum={m:g}"
                  for inner in adamw_lrs]


def render(sec: dict) -> str:
    s = sec["settings"]
    head = (f"## {sec['workers']} workers\n\n"
            f"{s['dataset']} (published split), {s['model']}, batch {s['batch_size']}, {s['epochs']:g} epochs, "
            f"inner and BSP lr {s['lr']:g}, H = 8 local steps; target {100 * sec['target']:g}%. `final - BSP`: "
            f"points against BSP's mean over the same seeds (a row meets the claim within 1 point); `last 5`: "
            f"the mean of the last 5 evaluations; `BSP/pushes`: BSP's pushes over the row's, in all and to "
            f"the target.\n\n")
    return rendered(sec, head, ["entry", "seeds", "final", "final min-max", "final - BSP", "meets", "last 5",
                                "last - BSP", "best", "pushes", "BSP/pushes", "reached", "BSP/pushes to target"],
                    lambda r: [r["entry"], ",".join(r["seeds"]), pct(r["final"]), spread(r), pct(r["final_vs_bsp"]),
                               "" if r["final_vs_bsp"] is None else ("yes" if r["final_vs_bsp"] >= -WITHIN else "no"),
                               pct(r["last"]), pct(r["last_vs_bsp"]), pct(r["best"]),
                               None if r["pushes"] is None else round(r["pushes"]), r["bsp_pushes_over"],
                               reached(r), r["bsp_pushes_to_target_over"]],
                    key=lambda r: (r["entry"] != "bsp", -(r["final"] or 0)))


def main(argv=None) -> int:
    split = lambda s: [x for x in s.split(",") if x]   # noqa: E731
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workers", type=lambda s: [int(x) for x in split(s)], default=[8, 32])
    p.add_argument("--seeds", default="0")
    p.add_argument("--outer", type=lambda s: [pair(x) for x in split(s)], default=[pair(x) for x in split(OUTER)],
                   help="outer LR:MOMENTUM pairs over the inner SGD")
    p.add_argument("--adamw-lrs", type=lambda s: [float(x) for x in split(s)], default=[0.001, 0.003],
                   help="the inner AdamW's learning rates (none: no AdamW runs)")
    p.add_argument("--adamw-outer", type=pair, default=(0.7, 0.9), help="the outer LR:MOMENTUM over AdamW")
    p.add_argument("--target", type=float, default=None, help="accuracy for the pushes to the target "
                                                              "(default: the workload's, 0.9)")
    p.add_argument("--parallel", type=int, default=1, help="simulations at once")
    p.add_argument("--timeout", type=float, default=3600, help="seconds one run may take")
    p.add_argument("--runs", default=os.path.join(os.path.dirname(HERE), "runs", "diloco"))
    p.add_argument("--name", default="diloco", help="results/<name>.{md,json}")
    args = p.parse_args(argv)
    seeds = parse_seeds(args.seeds)
    path = os.path.join(RESULTS, f"{args.name}.json")
    sections = {}
    if os.path.exists(path):
        with open(path) as fh:
            sections = {s["section"]: s for s in json.load(fh)["sections"]}
    entries = grid(args.outer, args.adamw_lrs, args.adamw_outer)
    for workers in args.workers:
        name = f"published-w{workers}-none"
        sections[name] = section("published", workers, "none", seeds, args, sections.get(name), entries)
    ordered = sorted(sections.values(), key=lambda s: s["workers"])
    for sec in ordered:
        sec["rows"] = rows(sec)
    notes = "The discussion: docs/paradigms.md (Local SGD and DiLoCo, 'The outer optimizer, measured').\n\n"
    write_results(args.name, {"sections": ordered}, notes + "\n".join(render(s) for s in ordered))
    return 0


if __name__ == "__main__":
    sys.exit(main())
