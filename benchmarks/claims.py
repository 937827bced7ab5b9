"""The seed papers' claims (docs/paradigms.md, "Expected"), checked on a
comparison's runs: per claim, the measured quantity in each seed, its mean and
spread, and whether the claim held in every seed (yes), some (partly) or none.

A claim compares a paradigm with others on the same cluster and seed: time to
the target accuracy (`time_to_target`), epochs to it (`epochs_to_target`),
time to the end of the budget (`wall_seconds`), final accuracy, bytes sent.
Where a paper gives no number ("close to ASP", "about as SSP"), the bound
used is written in the claim. A seed where the claim's paradigm never reached
the target reads "never" and does not hold; one where only the paradigm it is
compared with never did reads a ratio of 0.00 or, for a speed-up, "X never"
(and holds).

    python benchmarks/claims.py paradigms-mnist1d-32 ...   # the claims of results/NAME.{json,md}
                                                          # again, from the rows stored there
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys

import pandas as pd

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
# a comparison's run names start with their cluster's first three letters (paradigms.py)
CLUSTERS = {"het": "heterogeneous", "hom": "homogeneous"}
H = 8   # Local SGD's local steps at their default (Config.local_steps)


def async_local_sgd(workers: int) -> str:
    """Asynchronous Local SGD as Liu et al. 2024 propose it, as an entry of a
    comparison (paradigms.py): DyLU, and delayed Nesterov with N = W, so that
    the outer momentum is applied once per W pushes, as often per sample as
    the synchronous mode applies it (once a round); outer momentum 0.9,
    DiLoCo's, which this mode was measured at and trains best with (the
    synchronous default, 0.5, reached 93% in 1.5 times its time:
    benchmarks/results/async-scale.md)."""
    return f"localsgd:local_mode=async:dylu=true:delayed_nesterov={workers}:outer_momentum=0.9"


ASYNC_LOCAL = "localsgd async"   # the claims' name for async_local_sgd(W) at the rows' W

# (paradigm, cluster, claim as the paper says it, quantity, the bound that makes it hold)
# quantity(runs of one seed by paradigm) -> number (or str, _speedup's); holds(number) -> bool
CLAIMS = [
    ("dssp", "heterogeneous", "DSSP reaches the target sooner than BSP",
     "time to target, DSSP / BSP", lambda r: _t(r, "dssp") / _t(r, "bsp"), lambda x: x < 1),
    ("dssp", "heterogeneous", "DSSP reaches the target sooner than SSP",
     "time to target, DSSP / SSP", lambda r: _t(r, "dssp") / _t(r, "ssp"), lambda x: x < 1),
    ("dssp", "heterogeneous", "DSSP is close to ASP (here: within 25%)",
     "time to target, DSSP / ASP", lambda r: _t(r, "dssp") / _t(r, "asp"), lambda x: x <= 1.25),
    ("dssp", "homogeneous", "DSSP is about as fast as SSP (here: within 15%)",
     "time to target, DSSP / SSP", lambda r: _t(r, "dssp") / _t(r, "ssp"), lambda x: abs(x - 1) <= 0.15),
    ("dssp", "homogeneous", "DSSP is well ahead of BSP (here: at least 20% sooner)",
     "time to target, DSSP / BSP", lambda r: _t(r, "dssp") / _t(r, "bsp"), lambda x: x <= 0.8),
    ("gssp", "heterogeneous", "GSSP is 46% to 120% faster than BSP to the same accuracy",
     "speed-up over BSP to target", lambda r: _speedup(r, "gssp", "bsp"), lambda x: x >= 0.46),
    ("gssp", "heterogeneous", "GSSP is 46% to 120% faster than SSP to the same accuracy",
     "speed-up over SSP to target", lambda r: _speedup(r, "gssp", "ssp"), lambda x: x >= 0.46),
    ("gssp", "heterogeneous", "GSSP loses under 1 point of accuracy",
     "final accuracy, GSSP - BSP (points)", lambda r: _pts(r, "gssp", "bsp"), lambda x: x > -1),
    ("gssp+gdtopk", "heterogeneous", "GDTopK sends less than GSSP",
     "bytes sent, GSSP+GDTopK / GSSP", lambda r: _v(r, "gssp+gdtopk", "bytes_sent") / _v(r, "gssp", "bytes_sent"),
     lambda x: x < 1),
    ("gssp+gdtopk", "heterogeneous", "GSSP+GDTopK loses under 1 point of accuracy",
     "final accuracy, GSSP+GDTopK - BSP (points)", lambda r: _pts(r, "gssp+gdtopk", "bsp"), lambda x: x > -1),
    ("syncswitch", "heterogeneous", "Sync-Switch ends near ASP's time (here: at most 1.23x, the paper's)",
     "time to the end, Sync-Switch / ASP", lambda r: _v(r, "syncswitch", "wall_seconds") / _v(r, "asp", "wall_seconds"),
     lambda x: x <= 1.23),
    ("syncswitch", "heterogeneous", "Sync-Switch ends near BSP's accuracy (here: within 1 point)",
     "final accuracy, Sync-Switch - BSP (points)", lambda r: _pts(r, "syncswitch", "bsp"), lambda x: x >= -1),
    ("syncswitch", "heterogeneous", "Sync-Switch is more accurate than ASP",
     "final accuracy, Sync-Switch - ASP (points)", lambda r: _pts(r, "syncswitch", "asp"), lambda x: x > 0),
    ("lbbsp", "heterogeneous", "LB-BSP is faster than BSP per round (up to 2x)",
     "time to the end, BSP / LB-BSP", lambda r: _v(r, "bsp", "wall_seconds") / _v(r, "lbbsp", "wall_seconds"),
     lambda x: x > 1),
    ("lbbsp", "heterogeneous", "LB-BSP has BSP's accuracy per epoch (here: within 1 point)",
     "final accuracy, LB-BSP - BSP (points)", lambda r: _pts(r, "lbbsp", "bsp"), lambda x: abs(x) <= 1),
    ("vsgd", "heterogeneous", "VSGD is faster than SSP",
     "time to target, VSGD / SSP", lambda r: _t(r, "vsgd") / _t(r, "ssp"), lambda x: x < 1),
    ("vsgd", "heterogeneous", "VSGD is more accurate than SSP",
     "final accuracy, VSGD - SSP (points)", lambda r: _pts(r, "vsgd", "ssp"), lambda x: x >= 0),
    # the modern baselines (#38): docs/paradigms.md, "Local SGD and DiLoCo" and "BSP with backup workers"
    *[("localsgd", cluster, f"DiLoCo reaches BSP's accuracy with about H times fewer pushes (here: pushes to "
                            f"the target at least H / 1.25, H = {H})",
       "pushes to target, BSP / DiLoCo", lambda r: _fewer_pushes(r), lambda x: x >= H / 1.25)
      for cluster in ("heterogeneous", "homogeneous")],
    *[("localsgd", cluster, "DiLoCo ends at BSP's accuracy (here: at most 1 point below)",
       "final accuracy, DiLoCo - BSP (points)", lambda r: _pts(r, "localsgd", "bsp"), lambda x: x >= -1)
      for cluster in ("heterogeneous", "homogeneous")],
    (ASYNC_LOCAL, "heterogeneous", "Asynchronous Local SGD (DyLU, delayed Nesterov) is faster than synchronous "
                                   "DiLoCo under heterogeneity",
     "time to target, async / sync", lambda r: _ratio(r, ASYNC_LOCAL, "localsgd"), lambda x: x < 1),
    (ASYNC_LOCAL, "heterogeneous", "... at about the same accuracy per sample (here: at most 1 point below)",
     "final accuracy, async - sync (points)", lambda r: _pts(r, ASYNC_LOCAL, "localsgd"), lambda x: x >= -1),
    ("backup", "homogeneous", "Backup workers reach the target sooner than BSP under random stragglers",
     "time to target, backup / BSP", lambda r: _ratio(r, "backup", "bsp"), lambda x: x < 1),
    ("backup", "homogeneous", "Backup workers have BSP's accuracy per epoch (here: within 1 point)",
     "final accuracy, backup - BSP (points)", lambda r: _pts(r, "backup", "bsp"), lambda x: abs(x) <= 1),
]


def _v(runs: dict, name: str, column: str) -> float:
    value = runs[name][column] if name in runs else None
    return math.nan if value is None else float(value)


def _t(runs: dict, name: str, column: str = "time_to_target") -> float:
    """Time to target; a run that never reached it counts as never (inf), so
    a ratio with it is inf (or 0 as the denominator), and says so."""
    t = _v(runs, name, column)
    return math.inf if math.isnan(t) and name in runs else t


def _e(runs: dict, name: str) -> float:
    """Epochs to target (inf: never)."""
    return _t(runs, name, "epochs_to_target")


def _ratio(runs: dict, a: str, b: str) -> float:
    """Time to target, a / b: inf (never) when a never reached it, 0 when only b never did."""
    return _t(runs, a) / _t(runs, b)


def _speedup(runs: dict, a: str, base: str) -> float | str:
    """How much sooner a reached the target than `base`: t(base) / t(a) - 1."""
    return _against(_t(runs, a), _t(runs, base), base, lambda ta, tb: tb / ta - 1)


def _fewer_pushes(runs: dict) -> float | str:
    """How many times fewer pushes DiLoCo needed to the target than BSP: a
    push of Local SGD is H batches, BSP's one, so H x BSP's epochs / DiLoCo's."""
    return _against(_e(runs, "localsgd"), _e(runs, "bsp"), "bsp", lambda d, b: H * b / d)


def _against(a: float, base: float, name: str, better) -> float | str:
    """`better(a, base)`, a quantity that grows as a does better than base (a
    and base: times or epochs to the target); inf (never) when a never reached
    the target, "BASE never" when only base did not, NaN when a run is missing."""
    if math.isnan(a) or math.isnan(base):
        return math.nan
    if a == math.inf:
        return math.inf
    return better(a, base) if base != math.inf else f"{name.upper()} never"


def _pts(runs: dict, a: str, b: str) -> float:
    return 100 * (_v(runs, a, "final_accuracy") - _v(runs, b, "final_accuracy"))


def verdicts(table: list[dict], clusters: dict[str, str]) -> list[dict]:
    """One row per claim whose runs exist: each seed's value, mean, spread
    (min..max), verdict. `table`: summarize's rows; `clusters`: the cluster
    of each row's heterogeneity label."""
    frame = pd.DataFrame(table)
    frame["cluster"] = frame["heterogeneity"].map(clusters)
    out = []
    for paradigm, cluster, claim, quantity, measure, holds in CLAIMS:
        values = []
        for _, group in frame[frame["cluster"] == cluster].groupby("seed"):
            runs = {_claim_name(r): r for r in group.to_dict("records")}
            v = measure(runs) if paradigm in runs else math.nan
            if isinstance(v, str) or not math.isnan(v):
                values.append(v)
        if not values:
            continue
        held = sum(_held(holds, v) for v in values)
        numbers = [v for v in values if not isinstance(v, str)]
        finite = [v for v in numbers if math.isfinite(v)]
        out.append({"paradigm": paradigm, "cluster": cluster, "claim": claim, "quantity": quantity,
                    "seeds": values, "mean": sum(finite) / len(finite) if finite else math.inf,
                    "min": min(numbers, default=math.inf), "max": max(numbers, default=math.inf),
                    "verdict": "yes" if held == len(values) else "no" if held == 0 else
                    f"partly ({held}/{len(values)} seeds)"})
    return out


def _claim_name(row: dict) -> str:
    """A row's paradigm as the claims name it: async_local_sgd(W) is ASYNC_LOCAL."""
    workers = int(str(row.get("layout") or "0").split("+")[-1])
    # results made while 0.9 was every mode's default name it without its outer momentum
    names = (async_local_sgd(workers), async_local_sgd(workers).removesuffix(":outer_momentum=0.9"))
    return ASYNC_LOCAL if row["paradigm"] in names else row["paradigm"]


def _held(holds, value: float | str) -> bool:
    """A claim's verdict in one seed: the claim's paradigm never reaching the
    target (inf) does not hold; only the other never reaching it (a string) does;
    a number, as the claim's bound says."""
    if isinstance(value, str):
        return True
    return math.isfinite(value) and bool(holds(value))


def render_markdown(rows: list[dict]) -> str:
    lines = ["| paradigm | cluster | claim | measured | per seed | mean | spread | reproduced |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['paradigm']} | {r['cluster']} | {r['claim']} | {r['quantity']} | "
                     f"{', '.join(_num(v) for v in r['seeds'])} | {_num(r['mean'])} | "
                     f"{_num(r['min'])} .. {_num(r['max'])} | {r['verdict']} |")
    return "\n".join(lines) + "\n"


def _num(v: float | str) -> str:
    if isinstance(v, str):
        return v
    return "never" if v == math.inf else f"{v:.2f}"


def clusters_of(rows: list[dict]) -> dict[str, str]:
    """{heterogeneity label: cluster} of a comparison's rows, from their run names (CLUSTERS)."""
    return {r["heterogeneity"]: CLUSTERS[r["run"].split("-")[0]] for r in rows}


def refresh(name: str, where: str = RESULTS) -> list[dict]:
    """The claims of WHERE/NAME.json again, from its rows: into the JSON and
    the claims table of WHERE/NAME.md (nothing else of either changes)."""
    path = os.path.join(where, name)
    with open(path + ".json") as fh:
        data = json.load(fh)
    data["claims"] = verdicts(data["rows"], clusters_of(data["rows"]))
    with open(path + ".md") as fh:
        text = fh.read()
    section = re.compile(r"(## The seed papers' claims\n\n)\|.*?\|\n(?!\|)", re.S)
    if not section.search(text):
        raise SystemExit(f"{path}.md has no claims table under '## The seed papers' claims'")
    with open(path + ".json", "w") as fh:
        json.dump(data, fh, indent=2)
    with open(path + ".md", "w") as fh:
        fh.write(section.sub(lambda m: m.group(1) + render_markdown(data["claims"]), text, count=1))
    return data["claims"]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="The claims of results/NAME.{json,md} again, from the rows stored there.")
    p.add_argument("names", nargs="+", metavar="NAME", help="a comparison's results, e.g. paradigms-mnist1d-32")
    for name in p.parse_args(argv).names:
        refresh(name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
