"""The seed papers' claims (docs/paradigms.md, "Expected"), checked on a
comparison's runs: per claim, the measured quantity in each seed, its mean and
spread, and whether the claim held in every seed (yes), some (partly) or none.

A claim compares a paradigm with others on the same cluster and seed: time to
the target accuracy (`time_to_target`), time to the end of the budget
(`wall_seconds`), final accuracy, bytes sent. Where a paper gives no number
("close to ASP", "about as SSP"), the bound used is written in the claim.
"""
from __future__ import annotations

import math

import pandas as pd

# (paradigm, cluster, claim as the paper says it, quantity, the bound that makes it hold)
# quantity(runs of one seed by paradigm) -> number; holds(number) -> bool
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
     "speed-up over BSP to target", lambda r: _t(r, "bsp") / _t(r, "gssp") - 1, lambda x: x >= 0.46),
    ("gssp", "heterogeneous", "GSSP is 46% to 120% faster than SSP to the same accuracy",
     "speed-up over SSP to target", lambda r: _t(r, "ssp") / _t(r, "gssp") - 1, lambda x: x >= 0.46),
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
]


def _v(runs: dict, name: str, column: str) -> float:
    value = runs[name][column] if name in runs else None
    return math.nan if value is None else float(value)


def _t(runs: dict, name: str) -> float:
    """Time to target; a run that never reached it counts as never (inf), so
    a ratio with it is inf (or 0 as the denominator), and says so."""
    t = _v(runs, name, "time_to_target")
    return math.inf if math.isnan(t) and name in runs else t


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
            runs = {r["paradigm"]: r for r in group.to_dict("records")}
            v = measure(runs) if paradigm in runs else math.nan
            if not math.isnan(v):
                values.append(v)
        if not values:
            continue
        held = sum(bool(holds(v)) for v in values)
        finite = [v for v in values if math.isfinite(v)]
        out.append({"paradigm": paradigm, "cluster": cluster, "claim": claim, "quantity": quantity,
                    "seeds": values, "mean": sum(finite) / len(finite) if finite else math.inf,
                    "min": min(values), "max": max(values),
                    "verdict": "yes" if held == len(values) else "no" if held == 0 else
                    f"partly ({held}/{len(values)} seeds)"})
    return out


def render_markdown(rows: list[dict]) -> str:
    lines = ["| paradigm | cluster | claim | measured | per seed | mean | spread | reproduced |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['paradigm']} | {r['cluster']} | {r['claim']} | {r['quantity']} | "
                     f"{', '.join(_num(v) for v in r['seeds'])} | {_num(r['mean'])} | "
                     f"{_num(r['min'])} .. {_num(r['max'])} | {r['verdict']} |")
    return "\n".join(lines) + "\n"


def _num(v: float) -> str:
    return "never" if v == math.inf else f"{v:.2f}"
